"""A-Mem (PyPI a-mem) under MemGym's protocol, all real: A-Mem's own code and ChromaDB,
MiniLM, and SmolLM2 behind the loopback server analysing each note. Two conversations of two
turns: about 3 minutes on 2 cores."""

from __future__ import annotations

import importlib.util

import pytest

from memgym_env.conversation import Conversation, Message, QAItem, Session

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("agentic_memory") is None,
                                 reason="the peers extra: pip install 'memgym[peers]'")]


def _conversation(cid: str, first: str, second: str) -> Conversation:
    msgs = [Message("user", first, "Ana", {"id": "D1:1"}), Message("assistant", second, "Bot", {"id": "D1:2"})]
    return Conversation(cid, [Session("s1", "1 May 2023", msgs)],
                        [QAItem(f"{cid}/q0", "What is the name of Ana's dog?", "Max", evidence=["D1:1"])])


def test_a_mem_builds_notes_per_turn_and_answers_from_its_own_conversation(tmp_path):
    from membuilder.agents.peer_endpoint import model_endpoint
    from membuilder.llm.embedders import resolve_embedder_path
    from memgym_env.benchmarks.a_mem_system import AMemSystem
    from tests.llm_models import smollm2

    model = smollm2()
    endpoint, server = model_endpoint(model, max_tokens=32)
    system = AMemSystem(resolve_embedder_path("minilm"), k=5, endpoint=endpoint, server=server)
    dogs = _conversation("dogs", "I adopted a beagle called Max.", "Congratulations on Max!")
    music = _conversation("music", "I play the cello on Sundays.", "Lovely!")
    try:
        before = model.ledger.to_dict()["by_purpose"].get("write", {}).get("calls", 0)
        built = system.build(dogs, tmp_path / "dogs")
        assert built["notes"] == 2 and built["memories"] == 2 and built["sessions_built"] == 1
        # every note is analysed by the model; replies it cannot parse are counted, never raised
        assert model.ledger.to_dict()["by_purpose"]["write"]["calls"] - before >= 2
        assert 0 <= built["failed_analyses"] <= 2 and 0 <= built["failed_evolutions"] <= 1  # only the 2nd has neighbours
        assert built["embedded_texts"] >= 2 and system.costs["build"]["embed_calls"] >= 2  # A-Mem's own embeddings
        ctx = system.contexts(dogs, dogs.qa)[0]
        assert system.costs["retrieve"]["embedded_texts"] >= 1  # the question, embedded by A-Mem
        assert "[1 May 2023] Ana: I adopted a beagle called Max." in ctx.memory
        assert ctx.recall_level == "session" and ctx.written is True and ctx.read is True
        system.build(music, tmp_path / "music")
        shown = system.contexts(music, music.qa)[0].memory
        assert "cello" in shown and "beagle" not in shown  # each conversation has its own store
        again = system.build(dogs, tmp_path / "dogs")  # finished sessions are reused, not rewritten
        assert again["sessions_reused"] == 1 and again["notes"] == 0
    finally:
        system.close()
    assert server.sock.fileno() == -1


def test_a_mem_needs_an_endpoint():
    from memgym_env.benchmarks.a_mem_system import AMemSystem

    with pytest.raises(ValueError, match="needs an endpoint"):
        AMemSystem("unused")
