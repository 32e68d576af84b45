"""Whether written memory comes from the dialogue: a judge-free grounding measure.

An entry (a Core line, an Episodic, Semantic or Procedural memory, or an UPDATE/MERGE's new text)
is *grounded* when at least ``GROUNDED_SHARE`` of its content words (lower-cased words of three or
more letters or digits, stop words and the memory format's own labels left out) appear in the
session it was written from or in the memory the writer was shown. A policy that writes a
training world's catalog phrases instead of what was said scores low here whatever the reward
says; no judge model is involved, so the measure is the same on every machine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from membuilder.memory.ops import CoreAppend, CoreReplace, CoreRewrite, Op, written_text

GROUNDED_SHARE = 0.7
# The rule's version, kept with every grounding figure so one made under an older rule is made again. 2: the
# session's time is among what the writer was shown (under 1 a date taken from it counted as invented).
GROUNDING_RULE = 2
_STOP = frozenset(
    "the and for with from that this these those your you are was were has have had its into about than then "
    "they them their there here what when where which who whom will would could should can not but all any "
    "also just very more most some such only own same other been being does did done our ours his her hers "
    "she him how why out off over under again once each both few per via yes".split())
# Words the memory format itself writes (labels, not content): "Details:", "Steps:", "Context:", "since", ...
_FORMAT = frozenset("details steps context since user users mentioned first previously changed reason".split())


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.casefold()) if len(w) >= 3 and w not in _STOP and w not in _FORMAT}


def grounded_share(text: str, sources: Iterable[str]) -> float | None:
    """The share of ``text``'s content words found in ``sources``; None when it has none."""
    known: set[str] = set()
    for s in sources:
        known |= content_words(s)
    return share_in(text, known)


def share_in(text: str, known: set[str]) -> float | None:
    """The share of ``text``'s content words among ``known`` words (gathered once, e.g. a dialogue so far)."""
    words = content_words(text)
    return len(words & known) / len(words) if words else None


_CAPITALISED = re.compile(r"\b[A-Z][^\s:;,.!?()|\"'\u2019]*")  # a capitalised word, up to punctuation or a quote


def unsaid_capitals(text: str, known: set[str]) -> list[str]:
    """Words of ``text`` written with a capital (names, places, labels) that carry a content word outside
    ``known``. An invented name in an entry whose other words were said passes the share rule ("Adoption
    agencies: 'Carsmel'" has 4 of its 5 content words said); it shows here."""
    out: list[str] = []
    for word in _CAPITALISED.findall(text):
        words = content_words(word)
        if words and not words <= known and word not in out:
            out.append(word)
    return out


@dataclass
class Grounding:
    """Grounding of the entries of one or more outputs: how many were written and how many grounded."""

    entries: int = 0
    grounded: int = 0
    share_sum: float = 0.0

    def add(self, share: float | None) -> None:
        if share is None:
            return
        self.entries += 1
        self.share_sum += share
        self.grounded += share >= GROUNDED_SHARE

    @property
    def grounded_rate(self) -> float | None:
        return self.grounded / self.entries if self.entries else None

    @property
    def mean_share(self) -> float | None:
        return self.share_sum / self.entries if self.entries else None

    def to_dict(self) -> dict:
        return {"entries": self.entries, "grounded": self.grounded, "grounded_rate": self.grounded_rate,
                "mean_share": self.mean_share}


def written_units(ops: Sequence[Op], core_before: str = "") -> list[str]:
    """The texts a list of operations writes, one unit each: a Core write's new lines (a REWRITE's
    lines that were not in the block before), an entry operation's new memory."""
    units: list[str] = []
    old = {line.strip() for line in core_before.splitlines()}
    for op in ops:
        if isinstance(op, (CoreAppend, CoreRewrite, CoreReplace)):
            text = op.new_text if isinstance(op, CoreReplace) else op.content
            units += [line for line in text.splitlines() if line.strip() and line.strip() not in old]
        else:
            units += [line for line in written_text([op]).splitlines() if line.strip()]
    return units
