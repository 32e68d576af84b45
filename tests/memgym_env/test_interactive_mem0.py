"""The mem0 and mem0-infer assistants in MemoryGym-Interactive-v0, with the real SmolLM2,
MiniLM, FAISS and Mem0 (the protocol round trip of every assistant is in
test_interactive_assistants.py)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from membuilder.agents.assistants import make_assistant
from memgym_env.interactive.run_files import period_dir
from memgym_env.interactive.runner import RunConfig, evaluate_one
from memgym_env.world import WorldConfig, generate_world, write_world

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("mem0") is None,
                                 reason="the peers extra: pip install 'memgym[peers]'")]

SESSION = [{"role": "user", "content": "I just adopted a beagle called Max."},
           {"role": "assistant", "content": "Congratulations on Max!"}]


@pytest.fixture(scope="module")
def model():
    from tests.llm_models import smollm2

    return smollm2()


def test_raw_mem0_remembers_each_message_and_shows_it_with_its_time(model, embedder):
    a = make_assistant("mem0", model, embedder, top_k=5)
    a.reset("u1")
    a.observe(SESSION, time="2021-03-01", session_id="p0-s0")
    shown = a.context("What pet do I have?", "2021-03-02")
    assert "[2021-03-01] User: I just adopted a beagle called Max." in shown
    a.reset("u2")  # a new user starts with nothing
    assert a.memory_text() == "" and a.context("What pet do I have?", "2021-03-02") == ""
    a.close()


def test_mem0_infer_counts_writes_the_model_cannot_take(model, embedder):
    """SmolLM2's 8,192-token context is shorter than Mem0's extraction prompt: the loopback
    server refuses each write, the assistant counts it and carries on."""
    a = make_assistant("mem0-infer", model, embedder, write_tokens=16)
    a.reset("u1")
    a.observe(SESSION, time="2021-03-01", session_id="p0-s0")
    assert a.write_log == {"windows": 1, "memories": 0, "unparsed": 0, "refused": 1}
    assert "8192" in a.store.costs.first_refusal
    server = a._server
    a.close()
    assert server is not None and server.sock.fileno() == -1


def test_a_mem0_run_plays_every_period_and_reports(model, embedder, tmp_path):
    world = generate_world(WorldConfig(num_users=1, num_periods=1, num_questions=1, changes_per_period=1,
                                       changes_jitter=0))
    path = tmp_path / "world.json"
    write_world(world, path)
    cfg = RunConfig(world=str(path), assistant="mem0", out=str(tmp_path / "run"), reply_tokens=4, write_tokens=16,
                    context_tokens=256, factual_recall=True, top_k=5)
    results = evaluate_one(cfg, world, model, embedder, {})
    assert (tmp_path / "run" / "results.json").exists()
    state = json.loads((period_dir(tmp_path / "run", world[0].id, 0) / "state" / "assistant.json").read_text())
    assert state["assistant"] == "mem0" and state["state"]["memories"]
    assert state["state"]["costs"]["embed_calls"] >= len(state["state"]["memories"])
    assert results["overall"]["factual_recall"] is not None
