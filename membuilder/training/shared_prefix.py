"""Per-token log-probs of G completions that share one prompt, with the prompt run once.

GRPO scores G completions of every prompt. TRL runs each (prompt + completion) row through the
model on its own, so a 600-token prompt with G = 8 completions of 100 tokens costs 5,600 tokens
of forward and backward where 1,400 carry information: on a CPU that is most of an RL step.
Here the rows are grouped by identical prompt; each group's prompt goes through the backbone
once (its padding stripped, so positions start at 0 as in generation), its key/value cache is
repeated for the group's rows, and only the completions run on top of it, up to the group's
longest (not the batch's), with the vocabulary head at real tokens only. Gradients reach the
prompt's activations through the repeated cache, summed over the group's rows, which is what G
separate passes would give.
"""

from __future__ import annotations

import inspect

import torch


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """Row indices grouped by identical (prompt, mask), in order of first appearance."""
    groups: dict[tuple, list[int]] = {}
    for i in range(prompt_ids.size(0)):
        key = tuple(prompt_ids[i][prompt_mask[i].bool()].tolist())
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _parts(model):
    """(backbone, output head) of a causal LM, under PEFT and accelerate wrappers alike."""
    inner = getattr(model, "module", model)
    inner = inner.get_base_model() if hasattr(inner, "get_base_model") else inner
    inner = getattr(inner, "module", inner)
    return getattr(inner, inner.base_model_prefix), inner.get_output_embeddings()


def checkpointing(model) -> bool:
    """Whether ``model`` (under PEFT and accelerate wrappers alike) trains with activation checkpointing.

    Checkpointed decoder layers drop any key/value cache in training (transformers sets it to None
    and warns), so the completions would run without their prompt: the shared-prefix pass must not
    be used then. On a 2-layer model its log-probs were off by up to 0.24."""
    inner = getattr(model, "module", model)
    inner = inner.get_base_model() if hasattr(inner, "get_base_model") else inner
    inner = getattr(inner, "module", inner)
    flag = getattr(type(inner), "is_activation_checkpointing", None)
    if flag is not None:
        return bool(inner.is_activation_checkpointing)
    return bool(getattr(inner, "is_gradient_checkpointing", False))


def through_wrapper(model, compute):
    """``compute()`` run as the forward of ``model``'s wrapped module when ``model`` is a
    DistributedDataParallel wrapper, else plainly.

    DDP averages gradients over the processes only for a backward that follows its own forward;
    the shared-prefix passes call the backbone and the head directly, which would leave every
    process training on its own gradients. Run as the wrapped module's forward, once per
    micro-batch, they go through DDP like any other forward.
    """
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return compute()
    inner = model.module
    inner.forward = compute  # an instance attribute, found before the class's forward
    try:
        return model()
    finally:
        del inner.forward


def _repeat_cache(layers: list[tuple[torch.Tensor, torch.Tensor]], n: int):
    """A fresh cache holding the prompt's keys and values ``layers`` for ``n`` rows (the graph kept, so gradients
    reach the prompt's pass from every chunk of rows)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (keys, values) in enumerate(layers):
        cache.update(keys.expand(n, *keys.shape[1:]), values.expand(n, *values.shape[1:]), i)
    return cache


def shared_prefix_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                        temperature: float = 1.0, compute_entropy: bool = False, trim_padding: bool = True,
                        rows_per_pass: int | None = None):
    """Log-probs (and entropies) of the last ``logits_to_keep`` tokens of each row, as TRL's
    ``_get_per_token_logps_and_entropies`` returns them at real tokens, computing each distinct prompt once.

    ``trim_padding=False`` runs every completion to the batch's width and scores padding too, as TRL's pass
    does (``bench/shared_prompt_loss.py`` times all three). ``rows_per_pass``: the group's completions, shortest
    first, go through the backbone this many at a time, each pass padded to its own longest rather than the
    group's (None: the whole group in one pass). On a CPU the cost is the tokens computed, so padding a group's
    short completions to the one that ran to the limit is wasted work."""
    from transformers import DynamicCache

    backbone, head = _parts(model)
    # transformers renames past_key_values to cache (deprecated from 5.2x); take whichever this one has
    cache_arg = "cache" if "cache" in inspect.signature(backbone.forward).parameters else "past_key_values"
    width = input_ids.size(1) - logits_to_keep
    prompts, prompt_mask = input_ids[:, :width], attention_mask[:, :width]
    completions, completion_mask = input_ids[:, width:], attention_mask[:, width:]
    logps = input_ids.new_zeros(completions.shape, dtype=torch.float32)
    entropies = torch.zeros_like(logps) if compute_entropy else None
    out_logps, out_ent, out_rows = [], [], []
    for rows in prompt_groups(prompts, prompt_mask):
        idx = torch.tensor(rows, device=input_ids.device)
        prompt = prompts[rows[0]][prompt_mask[rows[0]].bool()].unsqueeze(0)
        # Completions come right-padded to the longest of the whole batch (the 256-token limit whenever one
        # rollout hit it), while a group's are mostly far shorter: the backbone runs to the group's last real
        # token only, and the vocabulary-wide head and softmax only at real tokens. Causal attention makes
        # the cut exact; padded positions keep log-prob 0, which the loss masks out anyway.
        group_mask = completion_mask[idx]
        used = group_mask.any(0).nonzero()
        width_used = max(1, int(used.max()) + 1) if used.numel() and trim_padding else completions.size(1)
        group_mask, group_ids = group_mask[:, :width_used], completions[idx, :width_used]
        cache = DynamicCache()
        first = backbone(input_ids=prompt, use_cache=True, **{cache_arg: cache})
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        last = first.last_hidden_state[:, -1:]
        # the prompt's last position predicts the first completion token; completion position t the next
        lengths = group_mask.sum(1)
        whole = rows_per_pass is None or rows_per_pass >= len(rows) or not trim_padding
        chunks = [torch.arange(len(rows))] if whole else list(torch.argsort(lengths, stable=True).split(rows_per_pass))
        group_logps = logps.new_zeros(len(rows), completions.size(1))
        group_ent = logps.new_zeros(len(rows), completions.size(1)) if compute_entropy else None
        for chunk in chunks:
            n = len(chunk)
            chunk_cache = _repeat_cache(layers, n)
            chunk_width = width_used if whole else max(1, int(lengths[chunk].max()))
            chunk_mask, chunk_ids = group_mask[chunk, :chunk_width], group_ids[chunk, :chunk_width]
            mask = torch.cat([prompt_mask.new_ones(n, prompt.size(1)), chunk_mask], dim=1)
            rest = backbone(input_ids=chunk_ids, attention_mask=mask, use_cache=True, **{cache_arg: chunk_cache})
            hidden = torch.cat([last.expand(n, -1, -1), rest.last_hidden_state[:, :-1]], dim=1)
            real = chunk_mask.bool() if trim_padding else torch.ones_like(chunk_mask, dtype=torch.bool)
            logits = head(hidden[real]).float() / temperature
            logp_all = torch.log_softmax(logits, dim=-1)
            at = torch.zeros(n, completions.size(1), dtype=torch.bool, device=input_ids.device)
            at[:, :chunk_width] = real
            group_logps = group_logps.index_copy(0, chunk.to(input_ids.device), logps.new_zeros(at.shape).masked_scatter(
                at, torch.gather(logp_all, -1, chunk_ids[real].unsqueeze(-1)).squeeze(-1)))
            if compute_entropy:
                with torch.no_grad():
                    group_ent = group_ent.index_copy(0, chunk.to(input_ids.device), logps.new_zeros(at.shape).masked_scatter(
                        at, -(logp_all.exp() * logp_all).sum(-1)))
        out_logps.append(group_logps)
        if compute_entropy:
            out_ent.append(group_ent)
        out_rows.append(idx)
    order = torch.cat(out_rows)
    logps = logps.index_copy(0, order, torch.cat(out_logps))
    if compute_entropy:
        entropies = entropies.index_copy(0, order, torch.cat(out_ent))
    return logps, entropies
