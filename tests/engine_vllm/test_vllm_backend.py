"""SmolLM2-135M-Instruct through vLLM's engine (the CPU build here), offline: one engine per module."""

from __future__ import annotations

import json

import pytest

from membuilder.llm import Sampling, load_chat_model
from membuilder.llm.registry import parse_spec

pytestmark = pytest.mark.slow

SHORT = Sampling(max_new_tokens=16)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def model():
    model = load_chat_model("vllm:smollm2-135m", max_model_len=2048)
    yield model
    model.close()


def test_short_names_pick_vllm_where_it_is_installed(monkeypatch):
    monkeypatch.delenv("MEMGYM_ENGINE", raising=False)
    assert parse_spec("smollm2-135m").backend == "vllm"
    assert parse_spec("/some/checkpoint").backend == "transformers"  # only the short names switch
    monkeypatch.setenv("MEMGYM_ENGINE", "transformers")
    assert parse_spec("smollm2-135m").backend == "transformers"
    monkeypatch.setenv("MEMGYM_ENGINE", "tpu")
    with pytest.raises(ValueError, match="MEMGYM_ENGINE"):
        parse_spec("smollm2-135m")


def test_engine_runs_in_the_dtype_this_platform_computes_natively(model):
    from vllm.platforms import current_platform

    from membuilder.llm.vllm_backend import cpu_engine_dtype

    expected = "cpu" if current_platform.is_cpu() else "cuda"
    assert model.device == expected
    assert model.engine.startswith("vllm ") and model.engine.endswith(f"on {expected}")
    if expected == "cpu":  # bfloat16 with AMX or AVX512-BF16, float32 on an AVX2-only CPU
        assert model.dtype == cpu_engine_dtype() == str(model.llm.llm_engine.model_config.dtype).replace("torch.", "")
    with pytest.raises(ValueError, match="runs on"):
        load_chat_model("vllm:smollm2-135m", device="cuda" if expected == "cpu" else "cpu")


def test_a_cpu_engine_runs_in_this_process_so_its_schedule_ignores_load(model):
    """In its own process the engine starts stepping while a call's requests still arrive, so under
    load a prompt can share a batch with others than when idle; in this process it cannot."""
    on_cpu = model.device == "cpu"  # elsewhere the core keeps its own process, as vLLM starts it
    assert model.in_process == on_cpu
    assert (type(model.llm.llm_engine.engine_core).__name__ == "InprocClient") == on_cpu


def test_greedy_reply_is_text_and_repeats(model):
    first = model.generate([ask("Name three colours.")], SHORT)[0]
    assert first.text.strip() and first.completion_tokens == len(first.token_ids) > 0 and first.prompt_tokens > 0
    assert model.generate([ask("Name three colours.")], SHORT)[0].text == first.text


def test_batch_of_eight_equals_eight_single_calls(model):
    """Greedy and bfloat16: a batch repeats exactly, and matches one-at-a-time calls up to
    bf16 near-ties, which batching can tip. The stated tolerance: at least 6 of 8 replies
    identical (with the engine in this process, one reply here parts at its first token and one
    at token 12)."""
    convs = [ask(f"Write one sentence about the number {i}.") for i in range(8)]
    batched = [c.token_ids for c in model.generate(convs, SHORT)]
    assert [c.token_ids for c in model.generate(convs, SHORT)] == batched
    singles = [model.generate([c], SHORT)[0].token_ids for c in convs]
    assert sum(b == s for b, s in zip(batched, singles)) >= 6


def test_max_new_tokens_bounds_the_reply(model):
    reply = model.generate([ask("Tell me a long story.")], Sampling(max_new_tokens=3))[0]
    assert reply.completion_tokens == 3 and reply.finish_reason == "length"


def test_json_schema_constrains_the_output(model):
    schema = {"type": "object", "properties": {"operation": {"type": "string", "enum": ["APPEND", "REWRITE"]},
                                               "content": {"type": "string", "maxLength": 40}},
              "required": ["operation", "content"], "additionalProperties": False}
    conv = ask("Record that the user's name is Ana. Reply with JSON.")
    (reply,) = model.generate([conv], Sampling(max_new_tokens=60, json_schema=schema))
    data = json.loads(reply.text)
    assert data["operation"] in ("APPEND", "REWRITE") and isinstance(data["content"], str)


def test_seeded_sampling_repeats_and_n_is_conversation_major(model):
    sampling = Sampling(n=2, max_new_tokens=8, temperature=1.0, seed=3)
    convs = [ask("Say something."), ask("Name an animal.")]
    first, second = model.generate(convs, sampling), model.generate(convs, sampling)
    assert len(first) == 4 and [c.text for c in first] == [c.text for c in second]
    assert first[0].prompt_tokens == first[1].prompt_tokens != first[2].prompt_tokens


def test_option_logprobs_prefer_the_obvious_and_match_transformers(model):
    conv = ask("What is the capital of France? Answer with the number only.\n1. Paris\n2. Banana\n3. Tuesday")
    scores = model.choice_logprobs(conv, ["1", "2", "3"])
    assert len(scores) == 3 and all(s < 0 for s in scores) and scores.index(max(scores)) == 0
    batch = model.choice_logprobs_batch([conv, ask("Is water wet? 1. yes 2. no")], [["1", "2", "3"], ["1", "2"]])
    # Batched with another prompt, the same scores to bfloat16's precision (the engine's kernels block a
    # batch differently, and on AMX that moved them by up to 0.08) and the same order.
    assert batch[0] == pytest.approx(scores, abs=0.15) and len(batch[1]) == 2
    assert sorted(range(3), key=lambda i: batch[0][i]) == sorted(range(3), key=lambda i: scores[i])
    multi = model.choice_logprobs(ask("Capital of France? One word."), ["Paris", "Banana split"])
    assert multi[0] > multi[1]
    # The same numbers as transformers in float32, to bfloat16's precision.
    reference = load_chat_model("transformers:smollm2-135m", dtype="float32", threads=1)
    expected = reference.choice_logprobs(conv, ["1", "2", "3"])
    assert scores == pytest.approx(expected, abs=0.25)
    assert expected.index(max(expected)) == 0


def test_one_token_options_read_the_next_token_only_and_agree_with_the_per_option_path(model):
    # Numbered options run the prompt once and read three next-token log-probabilities; an option of
    # several tokens sends the prompt through the per-option path (prompt_logprobs), whose single-token
    # rows are the same quantity: log p(label | prompt) over the whole vocabulary.
    conv = ask("Which is a fruit? Answer with the number only.\n1. Chair\n2. Apple\n3. River")
    fast = model.choice_logprobs(conv, ["1", "2", "3"])
    slow = model.choice_logprobs(conv, ["1", "2", "3", "Banana split"])[:3]
    # within bfloat16's batching noise (up to 0.08 on AMX, see above); float32 agrees far closer
    assert fast == pytest.approx(slow, abs=0.15) and all(s < 0 for s in fast)
    assert sorted(range(3), key=lambda i: fast[i]) == sorted(range(3), key=lambda i: slow[i])
    # Prompts of both kinds in one call keep their own rows.
    mixed = model.choice_logprobs_batch([conv, conv], [["1", "2", "3"], ["1", "2", "3", "Banana split"]])
    assert mixed[0] == pytest.approx(fast, abs=0.15) and mixed[1][:3] == pytest.approx(slow, abs=0.15)


def test_usage_is_booked(model):
    before = model.usage.calls
    model.generate([ask("Hi")], Sampling(max_new_tokens=2), purpose="probe")
    assert model.usage.calls == before + 1 and model.ledger.by_purpose["probe"].completion_tokens >= 1


def test_an_overlong_prompt_is_cut_to_the_engine_context_not_refused(model):
    """vLLM refuses a prompt of max_model_len tokens or more; the backend cuts the middle of the
    longest message first and books the cut, so a long LoCoMo session cannot end a build."""
    assert model.context_length == 2048
    long = ask("Remember these numbers: " + " ".join(str(i) for i in range(3000)) + "\nWhat is the first number?")
    before = model.usage.prompts_cut
    out = model.generate([long, ask("Hi")], Sampling(max_new_tokens=16))
    assert out[0].prompt_tokens <= 2048 - 16 and out[1].prompt_tokens < 64
    assert model.usage.prompts_cut == before + 1
    scores = model.choice_logprobs(long, ["0", "2999"])
    assert len(scores) == 2 and model.usage.prompts_cut == before + 2


def test_the_constructor_fits_a_long_session_by_its_memory_view(model):
    from membuilder.agents.constructor import MemBuilderPolicy

    policy = MemBuilderPolicy(model, Sampling(temperature=0.0, max_new_tokens=16))
    entries = tuple(f"Entry {i}: the user mentioned a hobby of theirs, number {i}, at some length." for i in range(200))
    obs = {"session": "user: I started pottery classes.", "session_time": "2024-01-01", "core": "",
           "core_usage": 0.0, "semantic": entries, "episodic": entries, "procedural": entries}
    before = model.usage.prompts_cut
    out = policy.act(obs)
    assert set(out) == {"core", "episodic", "semantic", "procedural"} and policy.prompts_cut == 3
    assert model.usage.prompts_cut == before  # cut by rank in the policy; nothing left for the engine
