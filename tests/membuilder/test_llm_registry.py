"""Model specs, the checkpoint cache, the light import, and the GPU-only vLLM backend."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading

import pytest

from membuilder.llm.checkpoints import MARKER, ensure_checkpoint, is_complete
from membuilder.llm.registry import ModelSpec, load_chat_model, parse_spec


def test_string_specs_pick_the_backend():
    assert parse_spec("smollm2-135m") == ModelSpec(model="smollm2-135m", backend="transformers")
    assert parse_spec("Qwen/Qwen3-4B").backend == "transformers"
    s = parse_spec("openai:Qwen/Qwen3-4B@http://127.0.0.1:8000/v1")
    assert (s.backend, s.model, s.base_url) == ("openai", "Qwen/Qwen3-4B", "http://127.0.0.1:8000/v1")
    assert parse_spec("vllm:/models/policy") == ModelSpec(model="/models/policy", backend="vllm")


def test_mapping_spec_keeps_backend_options_and_keyword_overrides():
    s = parse_spec({"backend": "openai", "model": "gpt-4.1-mini", "base_url": "https://h/v1",
                    "api_key_env": "JUDGE_KEY", "max_concurrency": 16, "timeout_s": 30}, max_concurrency=4)
    assert (s.api_key_env, s.max_concurrency, s.options) == ("JUDGE_KEY", 4, {"timeout_s": 30})


def test_bad_specs_say_what_is_wrong():
    with pytest.raises(ValueError, match="unknown backend"):
        parse_spec({"backend": "ollama", "model": "x"})
    with pytest.raises(ValueError, match="needs a 'model'"):
        parse_spec({"backend": "openai"})
    with pytest.raises(ValueError, match="needs a base_url"):
        load_chat_model("openai:some-model", base_url=None)
    with pytest.raises(ValueError, match="does not take base_url"):
        load_chat_model({"model": "smollm2-135m", "base_url": "http://x/v1"})


def test_missing_checkpoint_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        load_chat_model(str(tmp_path / "no-such-model"))


def test_api_key_comes_from_a_named_environment_variable(monkeypatch):
    monkeypatch.delenv("MEMGYM_TEST_ABSENT_KEY", raising=False)
    with pytest.raises(ValueError, match="MEMGYM_TEST_ABSENT_KEY"):
        load_chat_model("openai:m@http://127.0.0.1:9/v1", api_key_env="MEMGYM_TEST_ABSENT_KEY")
    monkeypatch.setenv("MEMGYM_TEST_KEY", "sk-secret-value")
    model = load_chat_model("openai:m@http://127.0.0.1:9/v1", api_key_env="MEMGYM_TEST_KEY")
    assert "sk-secret-value" not in repr(model) + repr(model.http)


def test_importing_membuilder_llm_loads_no_heavy_library():
    code = ("import sys, membuilder.llm, membuilder.llm.registry; "
            "print([m for m in ('torch', 'transformers', 'httpx', 'vllm') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _write_files(folder):
    (folder / "weights.bin").write_bytes(b"\x00" * 100)
    (folder / "config.json").write_text("{}")


def test_checkpoint_is_built_once_and_reused(tmp_path):
    calls = []
    build = lambda out: (calls.append(1), _write_files(out))  # noqa: E731
    first = ensure_checkpoint("tiny", build, root=tmp_path)
    second = ensure_checkpoint("tiny", build, root=tmp_path)
    assert first == second and len(calls) == 1 and is_complete(first)
    assert json.loads((first / MARKER).read_text())["files"]["weights.bin"] == 100


def test_half_written_checkpoint_is_detected_and_rebuilt(tmp_path):
    folder = ensure_checkpoint("tiny", _write_files, root=tmp_path)
    (folder / "weights.bin").write_bytes(b"\x00" * 10)  # truncated, as by a killed copy
    assert not is_complete(folder)
    ensure_checkpoint("tiny", _write_files, root=tmp_path)
    assert is_complete(folder) and (folder / "weights.bin").stat().st_size == 100
    (folder / MARKER).unlink()  # a build killed before its marker
    assert not is_complete(folder)
    assert is_complete(ensure_checkpoint("tiny", _write_files, root=tmp_path))


def test_failed_build_leaves_nothing_behind(tmp_path):
    def broken(out):
        _write_files(out)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        ensure_checkpoint("tiny", broken, root=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.lock"]


def test_concurrent_callers_build_once(tmp_path):
    calls = []

    def slow_build(out):
        calls.append(1)
        threading.Event().wait(0.2)
        _write_files(out)

    threads = [threading.Thread(target=ensure_checkpoint, args=("tiny", slow_build, tmp_path)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_cache_root_follows_memgym_cache(monkeypatch, tmp_path):
    from membuilder.llm.checkpoints import models_dir

    monkeypatch.setenv("MEMGYM_CACHE", str(tmp_path))
    assert models_dir() == tmp_path / "models"


HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_a_vllm_kv_cache_asked_for_wins_over_the_environment_and_must_be_whole_gb(monkeypatch):
    from membuilder.llm.vllm_backend import VLLMChatModel

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "5")
    with pytest.raises(ValueError, match="kv_cache_gb 1.5"):  # vLLM reads the variable as a whole number
        VLLMChatModel("smollm2-135m", kv_cache_gb=1.5)
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "5"


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here; this checks the message shown without it")
def test_vllm_backend_without_vllm_says_how_to_install():
    with pytest.raises(RuntimeError, match="pip install"):
        load_chat_model("vllm:smollm2-135m")


@pytest.mark.skipif(not (HAS_VLLM and _has_cuda()), reason="vLLM backend test needs vLLM and a CUDA GPU")
def test_vllm_backend_generates_json_and_scores_choices():
    from membuilder.llm import Sampling

    model = load_chat_model("vllm:smollm2-135m", gpu_memory_utilization=0.3, max_model_len=2048)
    conv = [{"role": "user", "content": "Give a JSON object with a key 'name' holding a colour."}]
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    (reply,) = model.generate([conv], Sampling(max_new_tokens=40, json_schema=schema))
    assert "name" in json.loads(reply.text)
    assert len(model.generate([conv, conv], Sampling(n=3, max_new_tokens=4, temperature=0.8, seed=1))) == 6
    scores = model.choice_logprobs([{"role": "user", "content": "Capital of France? One word."}], ["Paris", "Banana"])
    assert scores[0] > scores[1]


def test_engine_switch_moves_only_the_chat_short_names(monkeypatch):
    monkeypatch.setenv("MEMGYM_ENGINE", "vllm")
    assert parse_spec("smollm2-135m").backend == "vllm"
    assert parse_spec("minilm").backend == "transformers"  # an embedder name is never switched
    assert parse_spec("/models/policy").backend == "transformers"
    from membuilder.llm.embedders import load_embedder

    assert load_embedder("minilm").encode(["a cat"]).shape == (1, 384)
    monkeypatch.setenv("MEMGYM_ENGINE", "tpu")
    with pytest.raises(ValueError, match="MEMGYM_ENGINE"):
        parse_spec("smollm2-135m")
    monkeypatch.delenv("MEMGYM_ENGINE")
    expected = "vllm" if HAS_VLLM else "transformers"
    assert parse_spec("smollm2-135m").backend == expected
