"""The a-mem assistant in MemoryGym-Interactive-v0, all real: A-Mem's own code and ChromaDB,
MiniLM, and SmolLM2 behind the loopback server analysing each note (the protocol round trip of
every assistant is in test_interactive_assistants.py)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from membuilder.agents.assistants import make_assistant
from memgym_env.interactive.run_files import period_dir
from memgym_env.interactive.runner import RunConfig, evaluate_one
from memgym_env.world import WorldConfig, generate_world, write_world

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("agentic_memory") is None,
                                 reason="the peers extra: pip install 'memgym[peers]'")]

SESSION = [{"role": "user", "content": "I just adopted a beagle called Max."},
           {"role": "assistant", "content": "Congratulations on Max!"}]


@pytest.fixture(scope="module")
def model():
    from tests.llm_models import smollm2

    return smollm2()


def test_a_mem_notes_each_message_with_its_time_and_restores_them_without_the_model(model, embedder, tmp_path):
    a = make_assistant("a-mem", model, embedder, top_k=5, write_tokens=16)
    b = None
    try:
        a.reset("u1")
        assert a.context("What pet do I have?", "2021-03-02") == ""  # an empty store is searched without error
        before = model.ledger.to_dict()["by_purpose"].get("write", {}).get("calls", 0)
        a.observe(SESSION, time="2021-03-01", session_id="p0-s0")
        # every note is analysed by the model; replies A-Mem cannot parse are counted, never raised
        assert model.ledger.to_dict()["by_purpose"]["write"]["calls"] - before >= 2
        assert a.write_log["notes"] == 2 and 0 <= a.write_log["failed_analyses"] <= 2
        assert a.embedding_counts()["embedded_texts"] >= 2  # A-Mem's own embeddings, one per note at least
        shown = a.context("What pet do I have?", "2021-03-02")
        assert "[2021-03-01] User: I just adopted a beagle called Max." in shown
        a.save_state(tmp_path)
        saved = json.loads((tmp_path / "assistant.json").read_text())
        assert saved["assistant"] == "a-mem" and len(saved["state"]["notes"]) == 2
        calls = model.ledger.to_dict()["by_purpose"]["write"]["calls"]
        b = make_assistant("a-mem", model, embedder, top_k=5, write_tokens=16)
        b.load_state(tmp_path)
        assert model.ledger.to_dict()["by_purpose"]["write"]["calls"] == calls  # restored, not re-analysed
        assert b.context("What pet do I have?", "2021-03-02") == shown and b.memory_text() == a.memory_text()
        a.reset("u2")  # a new user starts with nothing
        assert a.memory_text() == "" and a.context("What pet do I have?", "2021-03-02") == ""
    finally:
        server = a._server
        a.close()
        if b is not None:
            b.close()
    assert server is not None and server.sock.fileno() == -1


def test_a_saved_state_without_a_notes_list_is_an_error_naming_the_field(model, embedder, tmp_path):
    (tmp_path / "assistant.json").write_text(json.dumps({"assistant": "a-mem", "state": {"notes": "oops"}}))
    a = make_assistant("a-mem", model, embedder)
    try:
        with pytest.raises(ValueError, match="'notes'"):
            a.load_state(tmp_path)
    finally:
        a.close()


def test_an_a_mem_run_plays_every_period_and_reports(model, embedder, tmp_path):
    world = generate_world(WorldConfig(num_users=1, num_periods=1, num_questions=1, changes_per_period=1,
                                       changes_jitter=0))
    path = tmp_path / "world.json"
    write_world(world, path)
    cfg = RunConfig(world=str(path), assistant="a-mem", out=str(tmp_path / "run"), reply_tokens=4, write_tokens=16,
                    context_tokens=256, factual_recall=True, top_k=5)
    assert cfg.assistant_options() == {"reply_tokens": 4, "context_tokens": 256, "write_tokens": 16, "top_k": 5}
    results = evaluate_one(cfg, world, model, embedder, {})
    assert (tmp_path / "run" / "results.json").exists()
    folder = period_dir(tmp_path / "run", world[0].id, 0)
    state = json.loads((folder / "state" / "assistant.json").read_text())
    assert state["assistant"] == "a-mem" and state["state"]["notes"]
    assert state["state"]["write_log"]["notes"] == len(state["state"]["notes"])
    usage = json.loads((folder / "evaluation.json").read_text())["usage"]
    assert usage["write"]["calls"] >= len(state["state"]["notes"])  # A-Mem's model calls are booked to the run
    assert results["overall"]["factual_recall"] is not None
