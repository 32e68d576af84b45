"""Every model call fits its prompt to the model's context (membuilder.llm.context_fit): a long
LoCoMo session once ended a vLLM build at a prompt of 4,097 tokens against a 4,096-token engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from membuilder.agents.constructor import MemBuilderPolicy, render_prompt
from membuilder.llm.base import Sampling
from membuilder.llm.context_fit import (
    MARK,
    PromptTooLong,
    fit_conversation,
    model_context_length,
    prompt_budget,
)
from membuilder.llm.transformers_backend import TransformersChatModel
from membuilder.llm.vllm_backend import CPU_FALLBACK_CONTEXT, cpu_context_length, cpu_engine_dtype
from tests.llm_models import smollm2


def words(conv):
    return sum(len(m["content"].split()) for m in conv)


def test_the_middle_of_the_longest_message_goes_and_the_rest_is_untouched():
    long = "INSTRUCTIONS first. " + " ".join(f"w{i}" for i in range(600)) + " QUESTION: where?"
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": long}]
    out, cut = fit_conversation(conv, words, 120)
    assert cut and words(out) <= 120
    assert out[0] == conv[0] and conv[1]["content"] == long  # the caller's conversation is not changed
    assert out[1]["content"].startswith("INSTRUCTIONS first.") and out[1]["content"].endswith("QUESTION: where?")
    assert MARK in out[1]["content"]
    same, cut = fit_conversation(conv, words, 10_000)
    assert same is conv and not cut


def test_a_prompt_that_cannot_be_cut_enough_says_so():
    conv = [{"role": "user", "content": "x " * 200}]
    with pytest.raises(PromptTooLong, match="cannot be cut to 1"):
        fit_conversation(conv, lambda c: 5 + words(c), 1)


def test_budget_leaves_the_completion_its_tokens_but_never_less_than_half_the_context():
    assert prompt_budget(8192, 384) == 7808
    assert prompt_budget(1000, 900) == 500
    assert prompt_budget(None, 10) is None


def test_vllm_cpu_context_is_the_models_own_where_the_cache_holds_it(tmp_path):
    from membuilder.llm.checkpoints import smollm2_checkpoint

    assert cpu_context_length(str(smollm2_checkpoint()), 2) == 8192  # SmolLM2's own context
    config = {"max_position_embeddings": 131072, "num_hidden_layers": 36, "num_attention_heads": 32,
              "num_key_value_heads": 8, "hidden_size": 4096}
    (tmp_path / "config.json").write_text(json.dumps(config))
    per_token = 2 * 36 * 8 * 128 * 2
    assert cpu_context_length(str(tmp_path), 1) == (1 << 30) // per_token // 16 * 16 < 131072
    # A float32 engine's cache holds keys and values in 4 bytes: half the tokens.
    assert cpu_context_length(str(tmp_path), 1, "float32") == (1 << 30) // (2 * per_token) // 16 * 16
    assert cpu_context_length(str(tmp_path / "missing"), 2) == CPU_FALLBACK_CONTEXT


def test_the_cpu_engine_runs_bfloat16_only_where_the_cpu_computes_it_natively():
    assert cpu_engine_dtype({"avx2", "fma"}) == "float32"  # AVX2 only: bfloat16 is emulated, 4-5x slower
    assert cpu_engine_dtype({"avx2", "avx512f", "avx512_bf16"}) == "bfloat16"
    assert cpu_engine_dtype({"avx512_bf16", "amx_bf16", "amx_tile"}) == "bfloat16"
    assert cpu_engine_dtype(set()) == "float32"
    flags = Path("/proc/cpuinfo").read_text().split("flags", 1)[-1].split("\n", 1)[0].split()
    assert cpu_engine_dtype() == cpu_engine_dtype(set(flags))  # this machine's, read from /proc/cpuinfo


@pytest.fixture(scope="module")
def small():
    """SmolLM2's weights behind a 320-token context, so a few paragraphs overflow it."""
    base = smollm2()
    return TransformersChatModel(model=base.model, tokenizer=base.tokenizer, name="smollm2-320", context_length=320)


def long_chat(n: int = 400) -> list[dict[str, str]]:
    return [{"role": "user", "content": "Remember these numbers: " + " ".join(str(i) for i in range(n))
             + "\nWhat is the first number?"}]


def test_the_backend_cuts_an_overlong_prompt_and_counts_it(small):
    assert model_context_length(smollm2()) == 8192 and small.context_length == 320
    before = small.usage.prompts_cut
    out = small.generate([long_chat(), [{"role": "user", "content": "Hi"}]], Sampling(max_new_tokens=8))
    assert out[0].prompt_tokens <= 320 - 8 and out[1].prompt_tokens < 40
    assert small.usage.prompts_cut == before + 1
    scores = small.choice_logprobs(long_chat(), ["0", "7"])
    assert len(scores) == 2 and all(s < 0 for s in scores)
    batch = small.choice_logprobs_batch([long_chat(), long_chat(50)], [["1", "2"], ["1", "2"]])
    assert len(batch) == 2 and small.usage.prompts_cut == before + 3


def test_the_constructor_cuts_its_memory_view_first():
    base = smollm2()
    model = TransformersChatModel(model=base.model, tokenizer=base.tokenizer, name="smollm2-1k", context_length=1024)
    policy = MemBuilderPolicy(model, Sampling(temperature=0.0, max_new_tokens=16))
    assert policy.prompt_limit == 1024 - 16 - 64
    entries = tuple(f"Entry {i}: the user mentioned hobby number {i} at length." for i in range(100))
    obs = {"session": "user: I started pottery classes.", "session_time": "2024-01-01", "core": "",
           "core_usage": 0.0, "semantic": entries, "episodic": (), "procedural": ()}
    prompt = policy.prompt("semantic", obs)
    text = prompt[-1]["content"]
    assert policy.prompts_cut == 1 and "I started pottery classes." in text and "Entry 1:" in text
    assert "Entry 99:" not in text and text != render_prompt("semantic", obs)[-1]["content"]
    policy.act(obs)
    assert model.usage.prompts_cut == 0  # fitted by rank here, so the backend had nothing to cut
