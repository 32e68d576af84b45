"""LoCoMo's token F1, as its published evaluation defines it (protocols §5).

Normalisation: drop commas, lower-case, drop punctuation, drop the words a/an/the/and, collapse
spaces; then Porter-stem each token (nltk) and take the multiset F1 of the two token bags.
Per category:

- 1 (multi-hop): gold and prediction are split on commas; for each gold part take the best F1
  against any predicted part; the score is the mean over gold parts;
- 2 (temporal), 4 (single-hop): plain token F1;
- 3 (open-domain): only the gold text before the first ';' counts (the rest is a rationale);
- 5 (adversarial): 1 if the prediction says the information is not available, else 0. The
  published rule looks for two phrases, "no information available" and "not mentioned"; we
  keep exactly those so our numbers stay comparable.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

# Phrases of the published category-5 rule, matched case-insensitively as substrings.
ADVERSARIAL_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = set(string.punctuation)


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem import PorterStemmer  # needs no downloaded data

    return PorterStemmer()


def normalize_answer(text: str) -> str:
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> list[str]:
    stem = _stemmer().stem
    return [stem(w) for w in normalize_answer(text).split()]


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = answer_tokens(prediction), answer_tokens(gold)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def multi_part_f1(prediction: str, gold: str) -> float:
    """Category 1: mean over comma-separated gold parts of the best F1 against a predicted part."""
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(token_f1(p, g) for p in preds) for g in golds) / len(golds)


def says_not_available(prediction: str) -> bool:
    low = str(prediction).lower()
    return any(p in low for p in ADVERSARIAL_PHRASES)


def locomo_f1(prediction: str, gold: str | None, category: int) -> float:
    """The published per-category F1 of one LoCoMo answer (gold may be None for category 5)."""
    if category == 5:
        return 1.0 if says_not_available(prediction) else 0.0
    if gold is None:
        raise ValueError(f"category {category} needs a gold answer")
    if category == 1:
        return multi_part_f1(prediction, gold)
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category in (2, 3, 4):
        return token_f1(prediction, gold)
    raise ValueError(f"LoCoMo category must be 1-5, got {category!r}")
