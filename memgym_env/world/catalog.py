"""The offline generator's catalog: state variables, phrasings, life events and questions.

The catalog lives in ``memgym_env/world/catalog/*.yaml`` (one file per life domain, plus
``questions.yaml`` and ``dialogue.yaml``); the format is described at the top of ``home.yaml``.
``load_catalog()`` reads and checks it once per process.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from memgym_env.world.types import VariableInfo

CATALOG_DIR = Path(__file__).with_name("catalog")
_SPECIAL_FILES = ("questions.yaml", "dialogue.yaml")
MIN_VALUES = 3
MIN_PHRASINGS = 3


@dataclass(frozen=True)
class ValueSpec:
    name: str
    text: str
    say: tuple[str, ...]
    events: tuple[str, ...]
    advice: str
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class VariableSpec:
    name: str
    domain: str
    title: str
    ask: str
    kind: str  # "state" | "routine"
    values: dict[str, ValueSpec]
    context: str | None = None

    def info(self) -> VariableInfo:
        return VariableInfo(
            title=self.title,
            domain=self.domain,
            kind=self.kind,
            values={v.name: v.text for v in self.values.values()},
            steps={v.name: list(v.steps) for v in self.values.values() if v.steps},
            context=self.context,
            ask=self.ask,
        )


@dataclass(frozen=True)
class QuestionSpec:
    query: str
    lead: str  # opens every personalised answer ("For your dinner party")
    variables: tuple[str, ...]  # candidates in order of relevance; a world uses the first k that fit


@dataclass(frozen=True)
class Dialogue:
    """Generic lines for the offline sessions' recorded messages."""

    replies: tuple[str, ...]  # assistant answers to an opening request
    follow_ups: tuple[str, ...]  # user follow-ups that reveal nothing new
    closings: tuple[str, ...]  # assistant answers to a follow-up
    event_intros: tuple[str, ...]  # user lines that tell the life event: "{event}" is "I ..."


@dataclass
class Catalog:
    variables: dict[str, VariableSpec]
    questions: list[QuestionSpec]
    dialogue: Dialogue
    domains: list[str] = field(default_factory=list)


class CatalogError(ValueError):
    pass


def _need(data: dict, key: str, where: str):
    if key not in data or data[key] in (None, "", []):
        raise CatalogError(f"{where}: missing '{key}'")
    return data[key]


def _variable(name: str, data: dict, domain: str, where: str) -> VariableSpec:
    where = f"{where}, variable '{name}'"
    kind = data.get("kind", "state")
    if kind not in ("state", "routine"):
        raise CatalogError(f"{where}: kind must be state or routine, got {kind!r}")
    values = {}
    for vname, v in _need(data, "values", where).items():
        vw = f"{where}, value '{vname}'"
        steps = tuple(v.get("steps") or ())
        if kind == "routine" and len(steps) < 2:
            raise CatalogError(f"{vw}: a routine value needs at least 2 steps")
        values[vname] = ValueSpec(
            name=vname,
            text=_need(v, "text", vw),
            say=tuple(_need(v, "say", vw)),
            events=tuple(_need(v, "events", vw)),
            advice=_need(v, "advice", vw),
            steps=steps,
        )
    return VariableSpec(name=name, domain=domain, title=_need(data, "title", where), ask=_need(data, "ask", where),
                        kind=kind, values=values, context=data.get("context"))


def _read_yaml(path: Path):
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML ({exc})") from exc


def catalog_issues(cat: Catalog) -> list[str]:
    """Content rules of the catalog (counts, phrasings that do not name the variable, ...)."""
    issues = []
    for var in cat.variables.values():
        if len(var.values) < MIN_VALUES:
            issues.append(f"variable '{var.name}': {len(var.values)} values, need {MIN_VALUES}")
        named = {var.name.replace("_", " ").lower(), var.name.lower(), var.title.lower()}
        advice = [v.advice for v in var.values.values()]
        if len(set(advice)) != len(advice):
            issues.append(f"variable '{var.name}': two values share the same advice")
        for value in var.values.values():
            if len(set(value.say)) < MIN_PHRASINGS:
                issues.append(f"variable '{var.name}' value '{value.name}': {len(set(value.say))} phrasings, need {MIN_PHRASINGS}")
            for line in value.say:
                if any(re.search(rf"\b{re.escape(n)}\b", line.lower()) for n in named):
                    issues.append(f"variable '{var.name}' value '{value.name}': phrasing names the variable: {line!r}")
    for i, q in enumerate(cat.questions):
        unknown = [v for v in q.variables if v not in cat.variables]
        if unknown:
            issues.append(f"questions[{i}] ({q.query!r}): unknown variables {unknown}")
        if not 2 <= len(q.variables):
            issues.append(f"questions[{i}] ({q.query!r}): needs at least 2 variables")
    return issues


@functools.lru_cache(maxsize=4)
def load_catalog(directory: str | None = None) -> Catalog:
    """Read every domain file, the questions and the dialogue lines; raise on any fault."""
    root = Path(directory) if directory else CATALOG_DIR
    variables: dict[str, VariableSpec] = {}
    domains = []
    for path in sorted(root.glob("*.yaml")):
        if path.name in _SPECIAL_FILES:
            continue
        data = _read_yaml(path) or {}
        domain = _need(data, "domain", str(path))
        domains.append(domain)
        for name, spec in _need(data, "variables", str(path)).items():
            if name in variables:
                raise CatalogError(f"{path}: variable '{name}' is already defined in domain '{variables[name].domain}'")
            variables[name] = _variable(name, spec, domain, str(path))
    qpath = root / "questions.yaml"
    questions = [
        QuestionSpec(query=_need(q, "query", f"{qpath}[{i}]"), lead=_need(q, "lead", f"{qpath}[{i}]"),
                     variables=tuple(_need(q, "variables", f"{qpath}[{i}]")))
        for i, q in enumerate(_read_yaml(qpath) or [])
    ]
    dpath = root / "dialogue.yaml"
    d = _read_yaml(dpath) or {}
    dialogue = Dialogue(**{k: tuple(_need(d, k, str(dpath))) for k in ("replies", "follow_ups", "closings", "event_intros")})
    cat = Catalog(variables=variables, questions=questions, dialogue=dialogue, domains=domains)
    issues = catalog_issues(cat)
    if issues:
        raise CatalogError(f"catalog {root}:\n" + "\n".join(issues))
    return cat
