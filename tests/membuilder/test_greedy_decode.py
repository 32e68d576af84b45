"""Greedy decoding that drops ended rows: the same tokens as transformers' generate, on SmolLM2."""

import pytest
import torch

from membuilder.llm.greedy_decode import greedy_decode

QUESTIONS = ["Say hi.", "What is 2 + 2? Answer with the number only.",
             "Write a long story about a lighthouse keeper and the storm of 1887.",
             "Name a colour.", "List the days of the week, one per line, with a note on each."]


@pytest.fixture(scope="module")
def smollm2():
    from membuilder.llm.checkpoints import smollm2_checkpoint
    from membuilder.llm.transformers_backend import TransformersChatModel

    # float32: a row's arithmetic then does not depend on the rest of its batch
    return TransformersChatModel(str(smollm2_checkpoint()), dtype="float32", threads=1)


def _rows(chat):
    return [chat.render([{"role": "user", "content": q}]) for q in QUESTIONS]


def _generate(chat, rows, n, **kwargs):
    """transformers' generate on the same left-padded batch, cut after each row's first end token."""
    pad = chat.tokenizer.pad_token_id
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.inference_mode():
        out = chat.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, do_sample=False,
                                  pad_token_id=pad, eos_token_id=sorted(chat.eos_ids), **kwargs)
    cut = []
    for row in out[:, width:].tolist():
        kept = []
        for t in row:
            kept.append(t)
            if t in chat.eos_ids:
                break
        cut.append(kept)
    return cut


def test_rows_leave_the_batch_as_they_end_and_keep_the_tokens_generate_picks(smollm2):
    rows = _rows(smollm2)
    mine = greedy_decode(smollm2.model, rows, 48, eos_ids=smollm2.eos_ids, pad_id=smollm2.tokenizer.pad_token_id)
    assert mine == _generate(smollm2, rows, 48)
    lengths = [len(m) for m in mine]
    assert min(lengths) < 48 and max(lengths) == 48  # short answers ended early, the story ran to the limit
    assert all(m[-1] in smollm2.eos_ids for m in mine if len(m) < 48)


def test_no_end_token_before_min_new_tokens_and_a_stop_flag_ends_every_row(smollm2):
    rows = _rows(smollm2)[:2]
    mine = greedy_decode(smollm2.model, rows, 24, eos_ids=smollm2.eos_ids, pad_id=smollm2.tokenizer.pad_token_id,
                         min_new_tokens=12)
    assert mine == _generate(smollm2, rows, 24, min_new_tokens=12)
    assert all(len(m) >= 12 and not set(m[:11]) & smollm2.eos_ids for m in mine)
    calls = []
    stopped = greedy_decode(smollm2.model, rows, 24, eos_ids=smollm2.eos_ids, pad_id=smollm2.tokenizer.pad_token_id,
                            should_stop=lambda: calls.append(1) or len(calls) >= 3)
    assert [len(s) for s in stopped] == [3, 3] and [s for s in stopped] == [m[:3] for m in mine]


def test_the_chat_backend_decodes_greedy_batches_this_way(smollm2):
    from membuilder.llm.base import Sampling

    convs = [[{"role": "user", "content": q}] for q in QUESTIONS]
    got = smollm2.generate(convs, Sampling(temperature=0.0, max_new_tokens=48))
    expected = _generate(smollm2, _rows(smollm2), 48)
    # the backend batches by prompt length; in float32 that does not change a row's tokens
    assert [c.token_ids for c in got] == expected
    assert [c.finish_reason for c in got] == ["stop" if len(e) < 48 else "length" for e in expected]
    with pytest.raises(ValueError, match="at least one prompt token"):
        greedy_decode(smollm2.model, [[]], 4, eos_ids=smollm2.eos_ids, pad_id=0)


def test_a_bfloat16_twin_reads_the_prompts_and_float32_decodes(smollm2):
    from membuilder.llm.checkpoints import smollm2_checkpoint
    from membuilder.llm.greedy_decode import bf16_prefill_is_fast
    from membuilder.llm.transformers_backend import TransformersChatModel

    chat = TransformersChatModel(str(smollm2_checkpoint()), dtype="float32", threads=1, prefill_dtype="bfloat16")
    assert next(chat.model.parameters()).dtype == torch.float32
    assert next(chat.prefill_model.parameters()).dtype == torch.bfloat16
    assert chat.engine == "transformers float32 on cpu, prompts read in bfloat16"
    rows = _rows(chat)
    got = greedy_decode(chat.model, rows, 24, eos_ids=chat.eos_ids, pad_id=chat.tokenizer.pad_token_id,
                        prefill=chat.prefill_model)
    # the first token is the twin's pick from the prompt; the rest decode from its cache in float32
    pad = chat.tokenizer.pad_token_id
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.inference_mode():
        first = chat.prefill_model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                                   logits_to_keep=1).logits[:, -1].float().argmax(-1).tolist()
    assert [g[0] for g in got] == first
    convs = [[{"role": "user", "content": q}] for q in QUESTIONS]
    from membuilder.llm.base import Sampling

    assert [c.token_ids for c in chat.generate(convs, Sampling(temperature=0.0, max_new_tokens=24))] == got
    # auto: a twin only for a float32 model on a CPU with bfloat16 dot products; never for a model passed in
    assert bf16_prefill_is_fast({"avx512_bf16"}) and bf16_prefill_is_fast({"amx_bf16"})
    assert not bf16_prefill_is_fast({"avx512f", "avx2"})
    auto = TransformersChatModel(model=smollm2.model, tokenizer=smollm2.tokenizer, prefill_dtype="auto")
    assert auto.prefill_model is None and smollm2.prefill_model is None
    with pytest.raises(ValueError, match="unknown dtype"):
        TransformersChatModel(str(smollm2_checkpoint()), dtype="float32", prefill_dtype="bf12")


@pytest.mark.parametrize("arch", ["llama-lora", "qwen3"])
def test_a_lora_wrapped_or_qwen3_policy_decodes_like_generate(arch):
    """Policies under training come wrapped by PEFT, and Qwen3 is the architecture trained at scale."""
    from membuilder.training.tiny import byte_tokenizer, tiny_llama, tiny_qwen3

    tok = byte_tokenizer()
    if arch == "qwen3":
        model = tiny_qwen3(tok, hidden=64, layers=2)
    else:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(tiny_llama(tok), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    model.eval()
    rows = [tok.encode(t, add_special_tokens=False) for t in ("memory", "a longer prompt here", "x")]
    # random models repeat one token: the last row's first pick, as the end token, ends that row at once
    probe = greedy_decode(model, rows, 12, eos_ids=set(), pad_id=tok.pad_token_id)
    end = probe[-1][0]
    assert all(end not in p for p in probe[:-1])
    got = greedy_decode(model, rows, 12, eos_ids={end}, pad_id=tok.pad_token_id)
    pad = tok.pad_token_id
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                             pad_token_id=pad, eos_token_id=end)
    expected = []
    for row in out[:, width:].tolist():
        expected.append(row[:row.index(end) + 1] if end in row else row)
    assert got == expected and [len(g) for g in got] == [12, 12, 1]


def test_the_cache_is_laid_out_once_and_holds_what_a_growing_cache_holds():
    """Decoding writes each step's keys and values in place: the layout is made at the prompt and never
    copied again (until rows leave), and the filled part equals transformers' growing cache."""
    from transformers import DynamicCache

    from membuilder.llm.greedy_decode import roomy_cache
    from membuilder.training.tiny import byte_tokenizer, tiny_llama

    tok = byte_tokenizer()
    model = tiny_llama(tok).eval()
    ids = torch.tensor([tok.encode("a prompt of a few bytes", add_special_tokens=False)] * 2)
    roomy, growing = roomy_cache(model.config, 3), DynamicCache(config=model.config)
    with torch.inference_mode():
        for cache in (roomy, growing):
            model(input_ids=ids, use_cache=True, past_key_values=cache)
        layout = [layer._keys.data_ptr() for layer in roomy.layers]
        for step in range(3):
            nxt = torch.full((2, 1), 65 + step)
            for cache in (roomy, growing):
                model(input_ids=nxt, use_cache=True, past_key_values=cache)
        assert [layer._keys.data_ptr() for layer in roomy.layers] == layout
        assert roomy.get_seq_length() == growing.get_seq_length() == ids.shape[1] + 3
        for mine, theirs in zip(roomy.layers, growing.layers, strict=True):
            assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values)
        with pytest.raises(ValueError, match="laid out for"):
            model(input_ids=torch.full((2, 1), 70), use_cache=True, past_key_values=roomy)
        roomy.batch_select_indices(torch.tensor([1]))
        assert roomy.layers[0].keys.shape[0] == 1 and roomy.get_seq_length() == ids.shape[1] + 3
