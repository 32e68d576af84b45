"""Current and superseded values of a user's state in memory text: MemoryGym-v0's stale-aware check.

A question of a world needs some state variables; ``QAItem.meta["states"]`` gives each one's
revealed values in order (the last is *current*, the earlier ones *superseded*) and the ways
each value of the variable may be written (``world.session_qa.value_states``).

**The matcher** (``mentions``), the one place text is read for values:

1. The text is split into clauses at ``|``, ``;``, line breaks and sentence ends, and each clause
   is normalised as the evidence check does (case folded, punctuation dropped).
2. Every phrasing of every value of the variable (and every mask) is found as whole words;
   overlapping finds keep the longest, so each span names one value.
3. A find is *history*, not a claim about now, when a history cue precedes it in its clause
   ("previously", "formerly", "used to", "was", "were", "from", "before", "earlier", "until",
   "no longer", "prior to") with no turn word between them ("to", "now", "currently",
   "became", "into", "then", "later"): "changed from A to B" states B, and A as history;
   "previously A" is history; "A (since 2024-03-01)" states A.

**A question passes the stale-aware check** (``stale_ok``) when, for every variable it needs whose
value has changed, the memory the answerer is shown (Core + top-k) states the current value
somewhere, and no superseded value is stated as current in the Core block or in a live Semantic or
Procedural entry. Episodic entries are dated events: "2024-03-01: moved | ... changed from A to B"
is history whatever words it uses, so they can hold the current value but never count as a stale
claim. Superseded entries (named by a later UPDATE or MERGE) are history too: the live view leaves
them out, and when history is shown they are not claims. A question whose variables never changed
(or that carries no ``states``, as conversation files do) is left to the evidence check alone.

A value of another variable that contains one of this variable's phrasings ("a french press"
holds "french") comes as a *mask* (``states[var]["masks"]``): its span is that other value's, so
a Core line about the coffee maker is not read as a claim about the language learned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from memgym_env.conversation import QAItem

_CLAUSE = re.compile(r"[|;\n]|\.(?:\s|$)")
_CUE = re.compile(r"\b(?:previously|formerly|used to|was|were|from|before|earlier|until|no longer|prior to)\b")
_TURN = re.compile(r"\b(?:to|now|currently|became|into|then|later)\b")
CLAIM_TYPES = ("core", "semantic", "procedural")  # where a superseded value must not be stated as current


def normalise(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


@dataclass(frozen=True)
class VariableValues:
    """One variable a question needs: its revealed values in order and each value's phrasings."""

    name: str
    history: tuple[str, ...]
    phrasings: Mapping[str, tuple[str, ...]]
    masks: tuple[str, ...] = ()  # other variables' values that contain one of these phrasings

    @property
    def current(self) -> str | None:
        return self.history[-1] if self.history else None

    @property
    def superseded(self) -> frozenset[str]:
        return frozenset(v for v in self.history[:-1] if v != self.current)

    @property
    def changed(self) -> bool:
        return bool(self.superseded)


def question_variables(item: QAItem) -> list[VariableValues]:
    """The variables of ``item.meta["states"]`` (empty when the question carries none)."""
    states = item.meta.get("states") if isinstance(item.meta, Mapping) else None
    if not isinstance(states, Mapping):
        return []
    out = []
    for name, spec in states.items():
        if not isinstance(spec, Mapping):
            raise ValueError(f"question {item.id}: meta.states.{name} must be an object with 'history' and 'phrasings'")
        history = tuple(str(v) for v in spec.get("history") or ())
        phrasings = {str(v): tuple(p for p in (normalise(str(x)) for x in ps) if p)
                     for v, ps in (spec.get("phrasings") or {}).items()}
        for v in history:
            phrasings.setdefault(v, (normalise(v.replace("_", " ")),))  # a world without readable texts
        masks = tuple(p for p in (normalise(str(x)) for x in spec.get("masks") or ()) if p)
        out.append(VariableValues(str(name), history, phrasings, masks))
    return out


def mentions(text: str, var: VariableValues) -> list[tuple[str, bool]]:
    """(value, stated as current) for every value of ``var`` written in ``text``, in order."""
    found: list[tuple[str, bool]] = []
    for clause in _CLAUSE.split(text):
        norm = normalise(clause)
        if not norm:
            continue
        spans: list[tuple[int, int, str | None]] = []
        for value, phrasings in [*var.phrasings.items(), (None, var.masks)]:
            for p in phrasings:
                for m in re.finditer(rf"(?<!\w){re.escape(p)}(?!\w)", norm):
                    spans.append((m.start(), m.end(), value))
        taken: list[tuple[int, int, str]] = []
        for start, end, value in sorted(spans, key=lambda s: (-(s[1] - s[0]), s[0])):
            if all(end <= a or start >= b for a, b, _ in taken):
                taken.append((start, end, value))
        for start, _, value in sorted(taken, key=lambda s: s[0]):
            if value is not None:  # a mask: another variable's value
                found.append((value, not _is_history(norm[:start])))
    return found


def _is_history(before: str) -> bool:
    cues = list(_CUE.finditer(before))
    if not cues:
        return False
    return not _TURN.search(before, cues[-1].end())


def states_current(text: str, var: VariableValues) -> bool:
    return any(v == var.current and now for v, now in mentions(text, var))


def states_superseded(text: str, var: VariableValues) -> bool:
    stale = var.superseded
    return any(v in stale and now for v, now in mentions(text, var))


def stale_ok(variables: Sequence[VariableValues], units: Iterable[tuple[str, str]]) -> bool:
    """The stale-aware check over the shown units, (memory type or "core", text) pairs of live memory."""
    changed = [v for v in variables if v.changed]
    if not changed:
        return True
    units = list(units)
    for var in changed:
        if not any(states_current(text, var) for _, text in units):
            return False
        if any(kind in CLAIM_TYPES and states_superseded(text, var) for kind, text in units):
            return False
    return True
