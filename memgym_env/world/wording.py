"""Varied surface wording of the offline world (``WorldConfig.wording: varied``).

Under the default ``fixed`` wording every world names a variable by the catalog's title and a
value by the catalog's one text, and the user's opening request never states that text, so the
only way to write the text a question's gold holds is to have learnt the catalog: a policy
trained there writes the catalog ("Workout routine: yoga practice") whatever the dialogue says.

Under ``varied`` wording each user draws, from ``wording.yaml`` and a random generator of its own
(so the world's structure - users, states, changes, times, questions - is the same as the fixed
world of the same seed), one title per variable and one text per value, never the catalog's, and
says the drawn text in the opening request ("Quick summary of my eating pattern: strictly
plant-based eating."). The replies, follow-ups, closings and event intros are drawn from the
catalog's lines and ours together. The drawn wording is the user's ``variable_info``, which the
oracle writes from and ``session_qa`` takes its golds and stale-aware phrasings from, so the
scoring reads the words the world used.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from memgym_env.world.catalog import Catalog, CatalogError, VariableSpec, load_catalog
from memgym_env.world.types import VariableInfo

WORDING_PATH = Path(__file__).with_name("wording.yaml")
WORDINGS = ("fixed", "varied")
MIN_VARIANTS = 2
# Words memgym_env.construction.state_values reads as "this value is history" when they precede a
# value in its clause, and the clause breaks it splits at: a title or text holding them would make
# the oracle's own lines read as stale.
_HISTORY_WORDS = re.compile(r"\b(?:previously|formerly|used to|was|were|from|before|earlier|until|no longer|prior to)\b")
_CLAUSE_BREAK = re.compile(r"[|;\n]|\.(?:\s|$)")
_DIALOGUE_KINDS = ("replies", "follow_ups", "closings", "event_intros")


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def _evidence_finds(gold: str, context: str) -> bool:
    """The evidence check's test (``memgym_env.construction.answers``): the gold's words in order,
    or 80% of its words of 3+ letters when it has at least 3 of them."""
    gold, context = _norm(gold), _norm(context)
    if re.search(rf"(?<!\w){re.escape(gold)}(?!\w)", context) or gold in context:
        return True
    words = [w for w in gold.split() if len(w) > 2]
    return len(words) >= 3 and sum(w in set(context.split()) for w in words) >= 0.8 * len(words)


@dataclass(frozen=True)
class WordingCatalog:
    titles: dict[str, tuple[str, ...]]  # variable -> other titles
    texts: dict[str, dict[str, tuple[str, ...]]]  # variable -> value -> other texts
    statements: tuple[str, ...]  # "{title}" / "{text}" frames said in the opening request
    dialogue: dict[str, tuple[str, ...]]  # replies, follow_ups, closings, event_intros beyond the catalog's


def wording_issues(words: WordingCatalog, cat: Catalog) -> list[str]:
    """The rules of ``wording.yaml`` against the catalog (listed at the top of the file)."""
    issues = []
    for name, spec in cat.variables.items():
        where = f"wording.yaml, variable '{name}'"
        if name not in words.titles:
            issues.append(f"{where}: missing")
            continue
        titles = words.titles[name]
        if len(set(titles)) < MIN_VARIANTS or spec.title in titles:
            issues.append(f"{where}: needs {MIN_VARIANTS} titles other than the catalog's {spec.title!r}, got {list(titles)}")
        if set(words.texts[name]) != set(spec.values):
            issues.append(f"{where}: values {sorted(words.texts[name])} are not the catalog's {sorted(spec.values)}")
            continue
        every = [(v, t) for v, ts in words.texts[name].items() for t in ts]
        for title in titles:
            if _HISTORY_WORDS.search(title.casefold()) or _CLAUSE_BREAK.search(title):
                issues.append(f"{where}: title {title!r} holds a history word or a clause break")
        for value, texts in words.texts[name].items():
            vw = f"{where}, value '{value}'"
            catalog_text = spec.values[value].text
            if len(set(texts)) < MIN_VARIANTS:
                issues.append(f"{vw}: needs {MIN_VARIANTS} different texts, got {list(texts)}")
            for text in texts:
                if _HISTORY_WORDS.search(text.casefold()) or _CLAUSE_BREAK.search(text):
                    issues.append(f"{vw}: text {text!r} holds a history word or a clause break")
                if _evidence_finds(text, catalog_text):
                    issues.append(f"{vw}: text {text!r} is found in the catalog's {catalog_text!r}")
                for other, other_text in every:
                    if other != value and re.search(rf"(?<!\w){re.escape(_norm(text))}(?!\w)", _norm(other_text)):
                        issues.append(f"{vw}: text {text!r} is inside value '{other}''s {other_text!r}")
    extra = set(words.titles) - set(cat.variables)
    if extra:
        issues.append(f"wording.yaml: variables not in the catalog: {sorted(extra)}")
    for frame in words.statements:
        if "{title}" not in frame or "{text}" not in frame:
            issues.append(f"wording.yaml, statements: {frame!r} must hold {{title}} and {{text}}")
    for frame in words.dialogue["event_intros"]:
        if "{event}" not in frame:
            issues.append(f"wording.yaml, event_intros: {frame!r} must hold {{event}}")
    return issues


@functools.lru_cache(maxsize=2)
def load_wording(path: str | None = None) -> WordingCatalog:
    """Read ``wording.yaml`` and check it against the catalog; raise on any fault."""
    path = Path(path) if path else WORDING_PATH
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML ({exc})") from exc
    variables = data.get("variables") or {}
    words = WordingCatalog(
        titles={k: tuple(v.get("titles") or ()) for k, v in variables.items()},
        texts={k: {val: tuple(ts or ()) for val, ts in (v.get("values") or {}).items()} for k, v in variables.items()},
        statements=tuple(data.get("statements") or ()),
        dialogue={k: tuple(data.get(k) or ()) for k in _DIALOGUE_KINDS},
    )
    if not words.statements or not all(words.dialogue.values()):
        raise CatalogError(f"{path}: needs statements and {', '.join(_DIALOGUE_KINDS)}")
    issues = wording_issues(words, load_catalog())
    if issues:
        raise CatalogError(f"{path}:\n" + "\n".join(issues))
    return words


class UserWording:
    """One user's drawn wording; its generator is apart from the world's, so drawing changes no structure."""

    def __init__(self, seed: int, index: int, cat: Catalog, words: WordingCatalog | None = None):
        self.cat = cat
        self.words = words or load_wording()
        self.rng = random.Random(f"memgym-wording-{seed}-user-{index}")

    def info(self, spec: VariableSpec, values: list[str]) -> VariableInfo:
        """The variable as this user's world words it: a drawn title and a drawn text per value."""
        title = self.rng.choice(self.words.titles[spec.name])
        texts = {v: self.rng.choice(self.words.texts[spec.name][v]) for v in values}
        return VariableInfo(title=title, domain=spec.domain, kind=spec.kind, values=texts,
                            steps={v: list(spec.values[v].steps) for v in values if spec.values[v].steps},
                            context=spec.context, ask=spec.ask)

    def statement(self, info: VariableInfo, value: str) -> str:
        """A sentence of the user's that states ``value`` in the world's words."""
        frame = self.rng.choice(self.words.statements)
        line = frame.format(title=info.title.lower(), text=info.text(value))
        steps = info.steps.get(value)
        if steps:
            # a routine's steps are said, not only its name: the oracle's Procedural entry lists them, and an
            # entry the session never supports teaches a writer to invent steps (and to loop on long lists)
            line += " How I go about it: " + " ".join(f"{s}." for s in steps)
        return line[0].upper() + line[1:]

    def line(self, kind: str, rng: random.Random | None = None) -> str:
        """A dialogue line of ``kind`` drawn from the catalog's lines and ours together (by ``rng``, else the
        user's own generator)."""
        return (rng or self.rng).choice(getattr(self.cat.dialogue, kind) + self.words.dialogue[kind])
