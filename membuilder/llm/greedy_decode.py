"""Greedy decoding that takes each row out of the batch once it has ended.

transformers' ``generate`` keeps every row of a batch in the forward pass until the last row ends,
so a batch costs its longest output times its rows. On a CPU a decoding step costs in proportion
to its rows (SmolLM2-135M in float32 on one thread of an AMD EPYC: 131 ms a step for 8 rows of a
640-token prompt, 269 ms for 16), and memory writers end at very different lengths: the trained
policy's Core operation is one short line while its Semantic list can run to the token limit.
Here a row that ends leaves the batch (its key/value cache rows are dropped), so a batch costs
the sum of its outputs' lengths.

The tokens are the ones ``generate`` picks greedily: the same forward passes, with the same
positions and masks, on fewer rows. In float32 a row's arithmetic does not depend on the other
rows of its batch (``tests/membuilder/test_greedy_decode.py`` checks the texts against
``generate``); in bfloat16 padding and batch shape can move a near tie either way, as they do in
``generate``.

**A prompt pass in another dtype** (``prefill``, ``bf16_prefill_is_fast``): the prompt is read
by a bfloat16 twin of a float32 model, whose key/value cache is then cast to float32 for the
decoding steps. On a CPU with AVX512-BF16 but no AMX, the prompt pass is compute-bound and runs
about twice as fast in bfloat16 (16 held-out prompts of 640 tokens, SmolLM2 on one thread of an
AMD EPYC: 51-58 s in float32, 25-30 s in bfloat16, side by side), while decoding one token at a
time is not faster in bfloat16 there, so it stays in float32. The tokens then follow bfloat16's
rounding of the prompt, as vLLM's bfloat16 engine's do; a run that must match float32 exactly
leaves ``prefill`` unset.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Sequence
from typing import Any

from membuilder.llm.cpu_flags import cpu_flags


def bf16_prefill_is_fast(flags: set[str] | None = None) -> bool:
    """Whether a float32 model on this CPU reads prompts faster through a bfloat16 twin: where the
    CPU has bfloat16 dot products (AVX512-BF16 or AMX). On AMX CPUs models run in bfloat16 by
    default anyway; this matters where float32 was kept or pinned."""
    flags = cpu_flags() if flags is None else flags
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


def cache_arg(module) -> str:
    """The keyword a forward pass takes its KV cache by: ``cache`` in newer transformers. A PEFT
    wrapper forwards keywords it does not name to its base model, so the base model's decides."""
    base = module.get_base_model() if callable(getattr(module, "get_base_model", None)) else module
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def greedy_decode(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, eos_ids: Collection[int],
                  pad_id: int, min_new_tokens: int = 0, should_stop: Callable[[], bool] | None = None,
                  prefill: Any = None) -> list[list[int]]:
    """Greedy continuations of token-id ``prompts`` (one batch, left-padded), each up to and
    including its first token in ``eos_ids``, or ``max_new_tokens`` long. An end token is not
    picked before ``min_new_tokens``. ``should_stop`` is polled after every step: once true, the
    tokens so far are returned. ``prefill``: a copy of ``model`` in another dtype that reads the
    prompts (see the module's note)."""
    import torch
    from transformers import DynamicCache

    if max_new_tokens < 1 or not prompts:
        return [[] for _ in prompts]
    if any(len(p) == 0 for p in prompts):
        raise ValueError("greedy_decode needs at least one prompt token per row")
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    # Positions count real tokens only, as generate derives them from the mask.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    ends = torch.tensor(sorted(eos_ids), device=device, dtype=torch.long)
    cache = DynamicCache(config=model.config)
    key = cache_arg(model)
    outputs: list[list[int]] = [[] for _ in prompts]
    active = list(range(len(prompts)))
    reader = model if prefill is None else prefill
    with torch.inference_mode():
        logits = reader(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                        logits_to_keep=1, **{cache_arg(reader): cache}).logits[:, -1].float()
        if reader is not model:
            dtype = next(model.parameters()).dtype
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys.to(dtype), layer.values.to(dtype)
        last = positions[:, -1]
        for step in range(max_new_tokens):
            if step < min_new_tokens and len(ends):
                logits[:, ends] = float("-inf")
            picked = logits.argmax(-1)
            keep = []
            for j, (row, tok) in enumerate(zip(active, picked.tolist(), strict=True)):
                outputs[row].append(tok)
                if tok not in eos_ids:
                    keep.append(j)
            if not keep or step == max_new_tokens - 1 or (should_stop is not None and should_stop()):
                break
            if len(keep) < len(active):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                mask, picked, last = mask[index], picked[index], last[index]
                active = [active[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
            last = last + 1
            logits = model(input_ids=picked[:, None], attention_mask=mask, position_ids=last[:, None],
                           use_cache=True, **{key: cache}).logits[:, -1].float()
    return outputs
