"""A long session written window by window: whole turns, in order, each window within the limit."""

from __future__ import annotations

import pytest

from membuilder.agents.session_windows import session_windows


def words(text: str) -> int:
    return len(text.split())


TURNS = [f"{'Caroline' if i % 2 else 'Melanie'}: " + " ".join(f"w{i}_{j}" for j in range(5 + 3 * (i % 4)))
         for i in range(30)]
SESSION = "\n".join(TURNS)


def test_windows_hold_every_turn_whole_in_order_within_the_limit():
    windows = session_windows(SESSION, 60, words)
    assert len(windows) > 1
    assert "\n".join(windows).split("\n") == TURNS  # nothing lost, nothing cut, nothing reordered
    for w in windows:
        assert sum(words(line) + 1 for line in w.split("\n")) <= 60


def test_the_last_window_is_not_a_scrap():
    total = sum(words(t) + 1 for t in TURNS)
    limit = total // 2 + 8  # two windows are needed; greedy packing would leave the second nearly empty
    windows = session_windows(SESSION, limit, words)
    sizes = [sum(words(line) + 1 for line in w.split("\n")) for w in windows]
    assert len(windows) == 2 and min(sizes) >= total / 2 - 20


def test_a_short_session_and_no_limit_are_the_session_itself():
    assert session_windows(SESSION, None, words) == [SESSION]
    assert session_windows(SESSION, 10_000, words) == [SESSION]
    one_long_turn = "Caroline: " + "word " * 500
    assert session_windows(one_long_turn, 20, words) == [one_long_turn]  # a turn is never cut


def test_a_turn_longer_than_the_window_stands_alone():
    long_turn = "Melanie: " + " ".join(["long"] * 80)
    windows = session_windows("\n".join([TURNS[0], long_turn, TURNS[1]]), 40, words)
    assert long_turn in windows and "\n".join(windows).split("\n") == [TURNS[0], long_turn, TURNS[1]]


def test_a_window_under_one_token_is_refused():
    with pytest.raises(ValueError, match="max_tokens"):
        session_windows(SESSION, 0, words)
