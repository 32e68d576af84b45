"""Scoring numbered options for many prompts at once: the cost centre of interactive evaluation.

An interactive run asks hundreds of multiple-choice questions and probes per assistant. The
``ChatModel`` protocol's ``choice_logprobs`` scores one prompt, one row per option, with the full
vocabulary's logits at every position. When every option label is a single token ("1", "2", ...)
the same numbers come from one forward pass per prompt reading only the last position's logits:
log p(label | prompt) is exactly the summed log-probability of a one-token reply. On a CPU this
is several times cheaper, and prompts of one call share a batch.

The fast path lives in the transformers backend (``choice_logprobs_batch``); any other
``ChatModel`` falls back to ``choice_logprobs`` per prompt, so results never depend on which
path ran.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from membuilder.llm.base import ChatMessages


def _bare(model):
    """The backend under a purpose-bound view, and the purpose to book calls under."""
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "ledger") and hasattr(model, "purpose"):
        return inner, model.purpose
    return model, None


def score_options(model, prompts: Sequence[ChatMessages], labels: Sequence[Sequence[str]]) -> list[list[float]]:
    """Log-probability of each label as the whole reply, for each prompt (``labels[i]`` for prompt i)."""
    if len(prompts) != len(labels):
        raise ValueError(f"score_options: {len(prompts)} prompts but {len(labels)} label lists")
    backend, purpose = _bare(model)
    batch = getattr(backend, "choice_logprobs_batch", None)
    if batch is not None and prompts:
        return batch(list(prompts), [list(ls) for ls in labels], purpose=purpose)
    return [list(model.choice_logprobs(p, list(ls))) for p, ls in zip(prompts, labels)]


def best_option(scores: Sequence[float]) -> int:
    """Index of the highest score; ties go to the first option."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def states_verbatim(value_text: str, memory: str) -> bool:
    """The memory holds the value's words in order (case and punctuation aside): support that
    needs no model. Values under 4 characters ("no", "2") never count, they match by chance."""
    want = " ".join(re.findall(r"[a-z0-9]+", value_text.lower()))
    if len(want) < 4:
        return False
    return f" {want} " in " " + " ".join(re.findall(r"[a-z0-9]+", memory.lower())) + " "


def stated_choice(choices: Sequence[str], memory: str) -> int | None:
    """The one choice that ``memory`` states word for word, or None when none or several are."""
    stated = [i for i, c in enumerate(choices) if states_verbatim(c, memory)]
    return stated[0] if len(stated) == 1 else None
