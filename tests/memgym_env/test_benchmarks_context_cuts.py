"""memgym eval's MemBuilder build fits each constructor prompt to the writer's context and keeps
the count across a resume (progress.json), so a build stopped and resumed still reports every cut."""

from __future__ import annotations

import json

from membuilder.llm.transformers_backend import TransformersChatModel
from memgym_env.benchmarks.systems import MemBuilder, membuilder_session_builder
from memgym_env.conversation import Conversation, Message, Session
from tests.llm_models import smollm2


def _conversation(sessions: int) -> Conversation:
    talk = " ".join(f"On day {d} I walked the beagle Max along the river and we met a neighbour." for d in range(40))
    return Conversation("long", [Session(f"s{i}", f"{i + 1} May 2023", [Message("user", talk, "Ana", {"id": f"D{i}:1"})])
                                 for i in range(sessions)], [])


def test_cuts_are_counted_and_survive_a_resume(tmp_path, embedder):
    base = smollm2()
    small = TransformersChatModel(model=base.model, tokenizer=base.tokenizer, name="smollm2-900", context_length=900)
    system = MemBuilder(membuilder_session_builder(small, max_new_tokens=8), embedder)
    first = system.build(_conversation(1), tmp_path / "bank")
    # a session of ~1,000 tokens does not fit 900 - 8 - 64: all four agents' prompts are cut, none fails
    assert first["sessions_built"] == 1 and first["constructor_prompts_cut"] == 4
    assert json.loads((tmp_path / "bank" / "progress.json").read_text())["prompts_cut"] == 4
    again = MemBuilder(membuilder_session_builder(small, max_new_tokens=8), embedder).build(_conversation(1),
                                                                                            tmp_path / "bank")
    assert again["sessions_reused"] == 1 and again["sessions_built"] == 0 and again["constructor_prompts_cut"] == 4


def test_a_long_session_written_in_windows_fits_the_writer_without_cuts(tmp_path, embedder):
    """construct_window_tokens: the same ~1,000-token session, as 40 turns, written in windows of whole turns: every
    prompt fits the small context, so nothing of the session is cut away."""
    base = smollm2()
    small = TransformersChatModel(model=base.model, tokenizer=base.tokenizer, name="smollm2-900", context_length=900)
    turns = [Message("user" if d % 2 == 0 else "assistant", f"On day {d} I walked the beagle Max along the river and "
                     "we met a neighbour.", "Ana" if d % 2 == 0 else "Ben", {"id": f"D0:{d}"}) for d in range(40)]
    conv = Conversation("turns", [Session("s0", "1 May 2023", turns)], [])
    whole = MemBuilder(membuilder_session_builder(small, max_new_tokens=8), embedder).build(conv, tmp_path / "whole")
    windowed = MemBuilder(membuilder_session_builder(small, max_new_tokens=8, window_tokens=200),
                          embedder).build(conv, tmp_path / "windows")
    assert whole["constructor_prompts_cut"] == 4 and windowed["constructor_prompts_cut"] == 0
    assert windowed["sessions_built"] == 1
