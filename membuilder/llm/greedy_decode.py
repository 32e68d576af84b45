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

**A cache with room for the whole output** (``RoomyLayer``): transformers' dynamic cache grows by
concatenation, so every decoding step copies the whole key/value cache of every layer. Here each
layer's cache is laid out once for the prompt and the longest output, each step writes one column
in place, and attention reads the filled part (a view): the same values in the same order, so the
same tokens. A static cache (HF ``StaticCache``) was tried and dropped: it attends over the whole
layout every step behind a mask, which ate the gain and moved bfloat16-prefilled tokens.
"""

from __future__ import annotations

import functools
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


@functools.cache
def _roomy_layer_class():
    from transformers.cache_utils import DynamicLayer  # here: importing this module must not load torch

    class RoomyLayer(DynamicLayer):
        """A full-attention cache layer laid out for ``room`` more positions than its first update
        (the prompt): later updates write in place and the layer's ``keys``/``values`` are views of the
        filled part, so a decoding step copies one column, not the whole cache."""

        def __init__(self, room: int):
            super().__init__()
            self.room, self.filled = room, 0
            self._keys = self._values = None

        def update(self, key_states, value_states, *args, **kwargs):
            n = key_states.shape[-2]
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                shape = (*key_states.shape[:-2], n + self.room, key_states.shape[-1])
                self._keys, self._values = key_states.new_empty(shape), value_states.new_empty(shape)
            if self.filled + n > self._keys.shape[-2]:
                raise ValueError(f"cache layer laid out for {self._keys.shape[-2]} positions; {self.filled + n} asked")
            self._keys[..., self.filled:self.filled + n, :] = key_states
            self._values[..., self.filled:self.filled + n, :] = value_states
            self.filled += n
            self._expose()
            return self.keys, self.values

        def _expose(self) -> None:
            self.keys, self.values = self._keys[..., :self.filled, :], self._values[..., :self.filled, :]

        def batch_select_indices(self, indices) -> None:
            if self.is_initialized:
                self._keys, self._values = self._keys[indices], self._values[indices]
                self._expose()

        def cast(self, dtype) -> None:
            if self.is_initialized:
                self._keys, self._values = self._keys.to(dtype), self._values.to(dtype)
                self._expose()

    return DynamicLayer, RoomyLayer


def roomy_cache(config, room: int):
    """A dynamic cache for ``config`` whose plain full-attention layers are ``RoomyLayer``s with ``room``
    spare positions (sliding-window and other special layers are kept as transformers makes them)."""
    from transformers import DynamicCache

    dynamic, roomy = _roomy_layer_class()
    cache = DynamicCache(config=config)
    cache.layers = [roomy(room) if type(layer) is dynamic else layer for layer in cache.layers]
    return cache


def greedy_decode(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, eos_ids: Collection[int],
                  pad_id: int, min_new_tokens: int = 0, should_stop: Callable[[], bool] | None = None,
                  prefill: Any = None) -> list[list[int]]:
    """Greedy continuations of token-id ``prompts`` (one batch, left-padded), each up to and
    including its first token in ``eos_ids``, or ``max_new_tokens`` long. An end token is not
    picked before ``min_new_tokens``. ``should_stop`` is polled after every step: once true, the
    tokens so far are returned. ``prefill``: a copy of ``model`` in another dtype that reads the
    prompts (see the module's note)."""
    import torch

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
    cache = roomy_cache(model.config, max_new_tokens)
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
                if hasattr(layer, "cast"):
                    layer.cast(dtype)
                else:
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
