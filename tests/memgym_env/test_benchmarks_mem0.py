"""Mem0 (PyPI mem0ai) under MemGym's protocol, all real: Mem0's own code, FAISS, MiniLM, and
SmolLM2 behind the loopback server for inferred writes. LoCoMo runs use conv-26 cut to its
first two sessions (and the questions answered there), so a build takes seconds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from memgym_env.benchmarks.runner import EvalConfig, evaluate
from memgym_env.cli import main as memgym
from memgym_env.conversation import Conversation, Message, QAItem, Session

pytestmark = [pytest.mark.slow,  # importing mem0 here would switch its telemetry on: only look for it
              pytest.mark.skipif(importlib.util.find_spec("mem0") is None,
                                 reason="the peers extra: pip install 'memgym[peers]'")]


@pytest.fixture(scope="module")
def two_sessions(shared_data, tmp_path_factory) -> Path:
    """conv-26 with sessions 1-2 only, and the questions whose evidence lies in them."""
    sample = json.loads((shared_data / "locomo" / "locomo10_conv-26.json").read_text())[0]
    conv = sample["conversation"]
    keep = {k: v for k, v in conv.items() if k.startswith("speaker_") or k.split("_")[1] in ("1", "2")}
    qa = [q for q in sample["qa"] if q.get("evidence") and all(e.split(":")[0] in ("D1", "D2") for e in q["evidence"])]
    path = tmp_path_factory.mktemp("locomo") / "conv-26-two-sessions.json"
    path.write_text(json.dumps([{**sample, "conversation": keep, "qa": qa}]))
    return path


def test_raw_mem0_runs_end_to_end_under_memgym_eval(two_sessions, tiny_chat_path, tmp_path):
    out = tmp_path / "run"
    assert memgym(["eval", "--benchmark", "locomo", "--data", str(two_sessions), "--system", "mem0",
                   "--answerer", tiny_chat_path, "--judge", tiny_chat_path, "--limit", "3", "--answer-max-tokens", "4",
                   "--judge-max-tokens", "4", "--batch-size", "3", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    turns = {m["dia_id"] for k, v in json.loads(two_sessions.read_text())[0]["conversation"].items()
             if k in ("session_1", "session_2") for m in v}
    assert len(results["items"]) == 3
    for item in results["items"]:
        assert item["recall_level"] == "memory-id" and item["written"] is True
        assert 0 < len(item["retrieved_ids"]) <= 10
    build = results["run"]["builds"]["conv-26"]
    assert build["memories"] == len(turns) and build["memories_written"] == len(turns) and build["llm_calls"] == 0
    stages = results["run"]["invocations"][-1]["stages"]
    assert stages["build"]["embed_calls"] == len(turns)  # one embedding per stored turn, none elsewhere
    assert stages["retrieve"]["embed_calls"] == 3 and stages["build"]["prompt_tokens"] == 0
    report = (out / "report.md").read_text()
    assert "stage build:" in report and "memories written" in report and "stage retrieve:" in report
    assert all(isinstance(i["evidence_retrieved"], bool) for i in results["items"])


def test_a_rerun_reuses_the_built_mem0_store(two_sessions, tiny_chat_path, tmp_path):
    cfg = EvalConfig(benchmark="locomo", data=str(two_sessions), out=str(tmp_path / "run"), system="mem0",
                     answerer=tiny_chat_path, judge=tiny_chat_path, limit=1, answer_max_tokens=4, judge_max_tokens=4,
                     judge_check=False)
    evaluate(cfg, quiet=True)
    cfg.limit = 2
    evaluate(cfg, quiet=True)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["builds"]["conv-26"]["sessions_reused"] == 2 and run["builds"]["conv-26"]["memories_written"] == 0


def test_one_conversation_never_retrieves_another_conversations_memories(tmp_path):
    from membuilder.agents.mem0_store import Mem0Store
    from membuilder.llm.embedders import resolve_embedder_path

    store = Mem0Store(tmp_path / "shared-store", resolve_embedder_path("minilm"))  # both in one FAISS index
    store.add([{"role": "user", "content": "Ana: I adopted a beagle called Max."}], "conv-a", infer=False)
    store.add([{"role": "user", "content": "Ben: My beagle Rex loves the beach."}], "conv-b", infer=False)
    store.add([{"role": "user", "content": "Ben: I play the cello on Sundays."}], "conv-b", infer=False)
    hits_a = store.search("Who has a beagle?", "conv-a", 10)
    hits_b = store.search("Who has a beagle?", "conv-b", 10)
    assert [h["memory"] for h in hits_a] == ["Ana: I adopted a beagle called Max."]
    assert {h["user_id"] for h in hits_b} == {"conv-b"} and len(hits_b) >= 1
    assert store.search("Who has a beagle?", "conv-c", 10) == []


def _tiny_conversation() -> Conversation:
    msgs = [Message("user", "I adopted a beagle called Max.", "Ana", {"id": "D1:1"}),
            Message("assistant", "Congratulations on Max!", "Bot", {"id": "D1:2"})]
    return Conversation("tiny", [Session("s1", "1 May 2023", msgs)],
                        [QAItem("tiny/q0", "What is the name of Ana's dog?", "Max", evidence=["D1:1"])])


def test_inferred_writes_through_the_loopback_server_fail_softly_with_smollm2(tmp_path):
    """Mem0's extraction prompt alone is longer than SmolLM2's 8,192-token context: at the
    model's own context the server refuses the write (counted); past it (12,288, where the
    model is out of its depth) SmolLM2 replies, Mem0 cannot parse the reply, stores nothing,
    and the count says so. Neither stops the run. About 90 s on 2 cores."""
    from membuilder.agents.peer_endpoint import model_endpoint
    from membuilder.llm.embedders import resolve_embedder_path
    from memgym_env.benchmarks.mem0_system import Mem0System
    from tests.llm_models import smollm2

    model = smollm2()
    conv = _tiny_conversation()
    for context, key in ((None, "writes_refused"), (12288, None)):
        endpoint, server = model_endpoint(model, max_tokens=48, context_length=context)
        system = Mem0System(resolve_embedder_path("minilm"), infer=True, endpoint=endpoint, server=server)
        try:
            built = system.build(conv, tmp_path / f"ctx-{context}")
            ctx = system.contexts(conv, conv.qa)[0]
        finally:
            system.close()
        assert built["sessions_built"] == 1
        if key == "writes_refused":
            assert built["writes_refused"] == 1 and built["llm_calls"] == 0
            assert "context is 8192 tokens" in built["first_refusal"]
        else:
            assert built["llm_calls"] == 1 and built["prompt_tokens"] > 8192
            # Mem0 either parsed facts out of the reply or logged that it could not: one or the other
            assert built["writes_unparsed"] + (built["memories_written"] > 0) == 1
            assert built["writes_refused"] == 0
        assert ctx.recall_level == "session" and isinstance(ctx.memory, str)
        assert server.sock.fileno() == -1  # close() stopped the loopback server


def test_inferred_mem0_needs_an_endpoint():
    from memgym_env.benchmarks.mem0_system import Mem0System

    with pytest.raises(ValueError, match="needs an endpoint"):
        Mem0System("unused", infer=True)
