"""``parse`` and ``strip_think`` take time linear in the input, on any string."""

from __future__ import annotations

import time

from membuilder.memory.ops import parse, strip_think


def test_many_unclosed_think_tags_parse_in_linear_time():
    started = time.perf_counter()
    out = parse("episodic", "<think>" * 100_000 + '{"operations": []}')
    assert time.perf_counter() - started < 2  # a lazy regex took 3.3 s on 8,000 tags, growing with the square
    assert out.valid and out.ops == []


def test_think_blocks_go_and_an_unclosed_one_keeps_what_follows():
    assert strip_think("a<think>plan <think>more</think>b") == "ab"
    assert strip_think("<think>cut off mid-thought {\"x\": 1}") == "cut off mid-thought {\"x\": 1}"
    assert strip_think("x</think>y<THINK>z") == "xyz"
