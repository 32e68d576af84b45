"""Retrieval and anchor metrics: did memory bring back the evidence, does the answer hold the key phrases.

- ``recall_at_k``: share of the reference memory ids (PerLTQA ``Reference Memory``; LoCoMo and
  LongMemEval evidence turns) found among the source ids of the top-k retrieved entries.
- ``anchor_coverage``: share of PerLTQA ``Memory Anchors`` phrases that appear in a text (the
  answer, or the retrieved context). Matching ignores case, punctuation and HTML entities; the
  anchors' character offsets do not line up with the English text, so they are not used.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence

_NON_WORD = re.compile(r"[^0-9a-z]+")


def _norm(text: str) -> str:
    return " " + " ".join(_NON_WORD.sub(" ", html.unescape(text).lower()).split()) + " "


def recall_at_k(retrieved: Sequence[Iterable[str]], reference: Sequence[str], k: int) -> float | None:
    """``retrieved``: per ranked hit, the source ids it holds. None when there is no reference."""
    ref = set(reference)
    if not ref:
        return None
    found: set[str] = set()
    for ids in list(retrieved)[:k]:
        found.update(ids)
    return len(ref & found) / len(ref)


def anchor_coverage(text: str, anchors: Sequence[str]) -> float | None:
    """None when the item has no anchors."""
    phrases = [p for p in (_norm(a).strip() for a in anchors) if p]
    if not phrases:
        return None
    hay = _norm(text)
    return sum(1 for p in phrases if f" {p} " in hay) / len(phrases)
