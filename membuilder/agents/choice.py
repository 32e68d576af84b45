"""Scoring numbered options for many prompts at once: the cost centre of interactive evaluation.

An interactive run asks hundreds of multiple-choice questions and probes per assistant. The
``ChatModel`` protocol's ``choice_logprobs`` scores one prompt, one row per option, with the full
vocabulary's logits at every position. When every option label is a single token ("1", "2", ...)
the same numbers come from one forward pass per prompt reading only the last position's logits:
log p(label | prompt) is exactly the summed log-probability of a one-token reply. On a CPU this
is several times cheaper, and prompts of one call share a batch.

The fast path needs the in-process transformers backend (``model.model``, ``model.tokenizer``,
``model.render``); any other ``ChatModel`` falls back to ``choice_logprobs`` per prompt, so
results never depend on which path ran.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from membuilder.llm.base import ChatMessages


def _bare(model):
    """The backend under a purpose-bound view, and the purpose to book calls under."""
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "ledger") and hasattr(model, "purpose"):
        return inner, model.purpose
    return model, None


def _single_token_ids(backend, labels: Sequence[str]) -> list[int] | None:
    tok = getattr(backend, "tokenizer", None)
    if tok is None or not hasattr(backend, "render") or not hasattr(backend, "model"):
        return None
    ids = [tok.encode(label, add_special_tokens=False) for label in labels]
    return [i[0] for i in ids] if all(len(i) == 1 for i in ids) else None


def score_options(model, prompts: Sequence[ChatMessages], labels: Sequence[Sequence[str]],
                  batch_size: int = 8) -> list[list[float]]:
    """Log-probability of each label as the whole reply, for each prompt (``labels[i]`` for prompt i)."""
    if len(prompts) != len(labels):
        raise ValueError(f"score_options: {len(prompts)} prompts but {len(labels)} label lists")
    backend, purpose = _bare(model)
    token_ids = [_single_token_ids(backend, ls) for ls in labels]
    out: list[list[float] | None] = [None] * len(prompts)
    fast = [i for i, t in enumerate(token_ids) if t is not None]
    for i in range(len(prompts)):
        if token_ids[i] is None:
            out[i] = list(model.choice_logprobs(prompts[i], list(labels[i])))
    if fast:
        rows = {i: backend.render(prompts[i]) for i in fast}
        order = sorted(fast, key=lambda i: len(rows[i]))  # similar lengths share a batch: less padding
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            for i, logprobs in zip(chunk, _last_logprobs(backend, [rows[i] for i in chunk], purpose), strict=True):
                out[i] = [float(logprobs[t]) for t in token_ids[i]]
    return [o if o is not None else [] for o in out]


def _last_logprobs(backend, rows: list[list[int]], purpose: str | None):
    """Next-token log-probabilities after each (left-padded) row, one forward pass."""
    import torch

    started = time.perf_counter()
    width = max(map(len, rows))
    pad = backend.tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=backend.device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=backend.device)
    # Left padding shifts positions; count them from each row's first real token, as generate does.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with backend._lock, torch.inference_mode():
        logits = backend.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                               logits_to_keep=1).logits[:, -1].float()
    logprobs = torch.log_softmax(logits, dim=-1).cpu()
    backend.ledger.record(purpose, len(rows), sum(map(len, rows)), 0, time.perf_counter() - started)
    return logprobs


def best_option(scores: Sequence[float]) -> int:
    """Index of the highest score; ties go to the first option."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))
