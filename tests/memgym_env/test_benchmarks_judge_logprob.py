"""Judging by log-probability: every verdict is decided, even by a judge too small to format one."""

from __future__ import annotations

import pytest

from memgym_env.benchmarks.judges import judge_batch
from memgym_env.conversation import QAItem


@pytest.fixture(scope="module")
def smollm2():
    from membuilder.llm import load_chat_model

    return load_chat_model("smollm2-135m", threads=1)


def test_logprob_judge_decides_every_item_and_matches_its_scores(smollm2):
    items = [QAItem("q1", "What pet does Caroline have?", "a cat named Luna"),
             QAItem("q2", "Where did Melanie travel?", "Lisbon", category="single-session-user")]
    verdicts = judge_batch(smollm2, "locomo", items, ["She has a cat called Luna.", "No idea."], mode="logprob")
    assert [v.raw for v in verdicts] and all(v.correct in (True, False) for v in verdicts)
    assert all(v.raw in ('{"label": "CORRECT"}', '{"label": "WRONG"}') for v in verdicts)
    yes_no = judge_batch(smollm2, "longmemeval", items[1:], ["Lisbon"], mode="auto")
    assert yes_no[0].raw in ("yes", "no")


def test_unknown_judge_mode_is_rejected(smollm2):
    with pytest.raises(ValueError, match="judge mode"):
        judge_batch(smollm2, "locomo", [QAItem("q", "?", "a")], ["a"], mode="vibes")
