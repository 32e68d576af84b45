"""PerLTQA's memory classification: which kind of memory does a question need?

PerLTQA (Du et al., 2024) files every question under the memory it is answered from: the
character's profile, a social relationship, an event, or a dialogue. Classifying the question
first lets a system search the right store; the benchmark scores it with precision, recall and
F1 per kind plus their macro and support-weighted averages.

Our classifier is any ``ChatModel`` picking one of four numbered descriptions, decided by the
log-probability of each option number (exact, one forward pass per question on local models).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from membuilder.agents.answer import choose_many

from .perltqa import QA_PARTS

MEMORY_KINDS = QA_PARTS  # the kinds PerLTQA files its questions under

# What each kind holds, in words a model can match a question against.
KIND_DESCRIPTIONS = {
    "profile": "the person's own profile: name, age, job, education, home, traits, skills",
    "social_relationship": "someone the person knows: who they are to the person and what they are like",
    "events": "something that happened in the person's life: what, when, where, who took part",
    "dialogues": "a conversation the person had: what was said, asked or advised in it",
}

SYSTEM = "You sort questions about a person by the kind of memory that answers them."


def classification_prompt(question: str, character: str | None = None) -> list[dict[str, str]]:
    who = f" about {character}" if character else ""
    options = "\n".join(f"{i}. {KIND_DESCRIPTIONS[k]}" for i, k in enumerate(MEMORY_KINDS, 1))
    user = (f"A question{who}:\n{question}\n\nWhich kind of memory holds its answer?\n{options}\n\n"
            "Reply with the number only.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def classify(model, questions: Sequence[str], characters: Sequence[str | None] | None = None) -> list[str]:
    """The predicted memory kind of each question (one of ``MEMORY_KINDS``)."""
    chars = list(characters) if characters is not None else [None] * len(questions)
    if len(chars) != len(questions):
        raise ValueError(f"classify: {len(questions)} questions but {len(chars)} characters")
    picks = choose_many(model, [(classification_prompt(q, c), len(MEMORY_KINDS)) for q, c in
                                zip(questions, chars, strict=True)])
    return [MEMORY_KINDS[i] for i in picks]


def classification_scores(gold: Sequence[str], predicted: Sequence[str],
                          labels: Sequence[str] = MEMORY_KINDS) -> dict[str, Any]:
    """Precision, recall and F1 per label; macro and support-weighted F1; accuracy.

    A label with no predictions has precision 0, one with no gold items recall 0 (and is left
    out of the averages, which run over labels that occur in the gold data).
    """
    if len(gold) != len(predicted):
        raise ValueError(f"classification_scores: {len(gold)} gold labels but {len(predicted)} predictions")
    per: dict[str, dict[str, float]] = {}
    for label in labels:
        tp = sum(1 for g, p in zip(gold, predicted, strict=True) if g == label and p == label)
        n_pred = sum(1 for p in predicted if p == label)
        n_gold = sum(1 for g in gold if g == label)
        precision = tp / n_pred if n_pred else 0.0
        recall = tp / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per[label] = {"precision": precision, "recall": recall, "f1": f1, "support": n_gold, "predicted": n_pred}
    present = [lab for lab in labels if per[lab]["support"]]
    total = sum(per[lab]["support"] for lab in present)
    return {
        "count": len(gold),
        "accuracy": sum(1 for g, p in zip(gold, predicted, strict=True) if g == p) / len(gold) if gold else None,
        "macro_f1": sum(per[lab]["f1"] for lab in present) / len(present) if present else None,
        "weighted_f1": sum(per[lab]["f1"] * per[lab]["support"] for lab in present) / total if total else None,
        "per_kind": per,
    }
