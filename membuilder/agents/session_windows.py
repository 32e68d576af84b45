"""A long session written as consecutive windows of whole turns.

A memory writer trained on short sessions fails on long ones: SmolLM2-135M trained on MemoryGym-v0
sessions of at most 163 tokens writes valid JSON for 11-37% of LoCoMo conv-26's sessions (487-1,586
tokens) in Core, Episodic and Semantic, against 98-100% on its held-out sessions
(results/ladder-keep-empty/README.md). Writing such a session window by window, each window no
longer than what the writer was trained on and each written into the memory the previous one left,
keeps every prompt in the length it learned. Turns are never cut: a window holds whole lines of the
transcript (one turn each), and a single turn longer than the window is a window of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def session_windows(text: str, max_tokens: int | None, count_tokens: Callable[[str], int]) -> list[str]:
    """``text`` (a transcript, one turn per line) as windows of whole lines of at most ``max_tokens`` tokens
    each, balanced so the last is not a scrap: a session of 170 tokens under a 160-token window is two of
    about 85, not 160 and 10. ``max_tokens`` None, or a session that fits, is one window: the whole session."""
    if max_tokens is None:
        return [text]
    if max_tokens < 1:
        raise ValueError(f"session window: max_tokens must be >= 1 or None, got {max_tokens}")
    lines = [line for line in text.split("\n") if line.strip()]
    costs = [count_tokens(line) + 1 for line in lines]  # +1: the newline between turns
    total = sum(costs)
    if total <= max_tokens or len(lines) < 2:
        return [text]
    # Each window aims at an equal share of what is left; a turn goes to the next window when it would carry this
    # one further past its share than stopping short of it leaves.
    windows: list[list[str]] = [[]]
    used, left = 0, total
    target = left / math.ceil(left / max_tokens)
    for line, cost in zip(lines, costs, strict=True):
        if windows[-1] and (used + cost > max_tokens or used + cost / 2 > target):
            windows.append([])
            left -= used
            used = 0
            target = left / math.ceil(left / max_tokens)
        windows[-1].append(line)
        used += cost
    return ["\n".join(w) for w in windows]
