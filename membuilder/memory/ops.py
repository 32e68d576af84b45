"""Typed memory operations and a parser that never raises on model output.

Each of the four memory agents answers with JSON (MemBuilder, protocols §1):

* Core returns one object: ``{"operation": "APPEND" | "REPLACE" | "REWRITE", ...}``.
* Episodic, Semantic and Procedural return ``{"operations": [{"action": ..., ...}, ...]}``;
  an empty list means "nothing to do" and is valid.

``parse(agent, text)`` strips ``<think>`` blocks and code fences, takes the first balanced JSON
object, and checks the action names and the keys of that agent (each operation carries exactly
its action's fields: MemBuilder lists the required ones; a key beyond them marks a garbled
operation, not a harmless extra). Any fault makes the whole
output invalid (the validity gate of the reward treats an invalid agent as one that did nothing);
the reasons are returned as readable strings so they can be logged as a penalty.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

AGENTS: tuple[str, ...] = ("core", "episodic", "semantic", "procedural")
SEARCHABLE_AGENTS: tuple[str, ...] = ("episodic", "semantic", "procedural")

# The rule set ``parse`` applies, recorded beside every cached evaluation so one made under an older
# rule is scored again: 1, MemBuilder's (the required fields present, other keys ignored); 2, an
# operation carries exactly its action's fields.
OPS_SCHEMA = 2

# Longest text one operation may carry into the bank; longer text is cut with a warning so a
# runaway generation cannot blow up the index or the embedder.
MAX_FIELD_CHARS = 20_000
# Bound on how many '{' positions we try to decode from, so adversarial text stays linear-ish.
_MAX_JSON_STARTS = 256


@dataclass(frozen=True)
class CoreAppend:
    content: str
    action: ClassVar[str] = "APPEND"


@dataclass(frozen=True)
class CoreReplace:
    old_text: str
    new_text: str
    action: ClassVar[str] = "REPLACE"


@dataclass(frozen=True)
class CoreRewrite:
    content: str
    action: ClassVar[str] = "REWRITE"


@dataclass(frozen=True)
class Add:
    memory: str
    action: ClassVar[str] = "ADD"


@dataclass(frozen=True)
class Update:
    old_memory: str
    new_memory: str
    action: ClassVar[str] = "UPDATE"


@dataclass(frozen=True)
class Merge:
    old_memories: tuple[str, ...]
    new_memory: str
    action: ClassVar[str] = "MERGE"


@dataclass(frozen=True)
class Skip:
    reason: str
    action: ClassVar[str] = "SKIP"


Op = CoreAppend | CoreReplace | CoreRewrite | Add | Update | Merge | Skip

# action name -> (class, {field: kind}); kind "str" or "str_list".
_SPECS: dict[str, tuple[type, dict[str, str]]] = {
    "APPEND": (CoreAppend, {"content": "str"}),
    "REPLACE": (CoreReplace, {"old_text": "str", "new_text": "str"}),
    "REWRITE": (CoreRewrite, {"content": "str"}),
    "ADD": (Add, {"memory": "str"}),
    "UPDATE": (Update, {"old_memory": "str", "new_memory": "str"}),
    "MERGE": (Merge, {"old_memories": "str_list", "new_memory": "str"}),
    "SKIP": (Skip, {"reason": "str"}),
}

# field name -> the actions that take it, for naming a misplaced field in an error
_FIELD_OWNER: dict[str, str] = {
    f: "/".join(sorted(a for a, (_, fs) in _SPECS.items() if f in fs)) for _, fs in _SPECS.values() for f in fs
}

ALLOWED_ACTIONS: dict[str, frozenset[str]] = {
    "core": frozenset({"APPEND", "REPLACE", "REWRITE"}),
    "episodic": frozenset({"ADD", "UPDATE", "MERGE"}),
    "semantic": frozenset({"ADD", "UPDATE", "SKIP"}),
    "procedural": frozenset({"ADD", "UPDATE"}),
}


@dataclass
class Parsed:
    """What one agent's output turned into."""

    agent: str
    ops: list[Op] = field(default_factory=list)
    valid: bool = False
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_THINK_TAG = re.compile(r"</?think>", re.IGNORECASE)
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)


def strip_think(text: str) -> str:
    """Drop each ``<think> ... </think>`` block (from an opening tag to the first closing one) and
    every tag left over. An unterminated ``<think>`` (generation cut mid-thought) keeps the text
    after it, which may still hold the answer. One pass over the tags: linear in the input
    (a lazy ``<think>.*?</think>`` regex took 3 s on 8,000 unclosed tags)."""
    kept: list[str] = []
    pending: list[str] = []  # text inside an open block: dropped if it closes, kept if it never does
    pos, inside = 0, False
    for tag in _THINK_TAG.finditer(text):
        piece, pos = text[pos:tag.start()], tag.end()
        closing = tag.group().startswith("</")
        if not inside:
            kept.append(piece)
            inside = not closing
        else:
            pending.append(piece)
            if closing:
                pending.clear()
                inside = False
    return "".join(kept + pending + [text[pos:]])


def clean_output(text: str) -> str:
    """Drop reasoning blocks and unwrap code fences, keeping everything else in order."""
    text = strip_think(text)
    fenced = _FENCE.findall(text)
    if fenced:
        text = "\n".join(fenced)
    return text


def first_json_object(text: str) -> tuple[dict | None, str | None]:
    """Return the first balanced JSON object in ``text`` and an error message if there is none."""
    decoder = json.JSONDecoder()
    starts = 0
    pos = text.find("{")
    last_error = "no JSON object found"
    while pos != -1 and starts < _MAX_JSON_STARTS:
        starts += 1
        try:
            obj, _ = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            last_error = f"invalid JSON: {exc}"
        else:
            if isinstance(obj, dict):
                return obj, None
        pos = text.find("{", pos + 1)
    return None, last_error


def _coerce(value: Any, kind: str, where: str, warnings: list[str]) -> tuple[Any, str | None]:
    if kind == "str":
        if not isinstance(value, str):
            return None, f"{where} must be a string, got {type(value).__name__}"
        if not value.strip():
            return None, f"{where} is empty"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # Lone surrogates (from "\ud800"-style escapes) cannot be embedded or saved as UTF-8.
            value = value.encode("utf-8", "replace").decode("utf-8")
            warnings.append(f"{where}: invalid unicode replaced")
        if len(value) > MAX_FIELD_CHARS:
            warnings.append(f"{where} cut from {len(value)} to {MAX_FIELD_CHARS} characters")
            value = value[:MAX_FIELD_CHARS]
        return value, None
    # str_list
    if not isinstance(value, list) or not value:
        return None, f"{where} must be a non-empty list of strings"
    items = []
    for i, item in enumerate(value):
        got, err = _coerce(item, "str", f"{where}[{i}]", warnings)
        if err:
            return None, err
        items.append(got)
    return tuple(items), None


def _build_op(agent: str, raw: Any, key: str, where: str, warnings: list[str]) -> tuple[Op | None, str | None]:
    if not isinstance(raw, dict):
        return None, f"{where} must be an object, got {type(raw).__name__}"
    name = raw.get(key)
    if not isinstance(name, str):
        return None, f"{where} has no string '{key}'"
    action = name.strip().upper()
    if action not in ALLOWED_ACTIONS[agent]:
        allowed = ", ".join(sorted(ALLOWED_ACTIONS[agent]))
        return None, f"{where}: {key} '{name[:40]}' is not allowed for {agent} (allowed: {allowed})"
    cls, fields = _SPECS[action]
    kwargs = {}
    for fname, kind in fields.items():
        if fname not in raw:
            return None, f"{where}: {action} needs '{fname}'"
        value, err = _coerce(raw[fname], kind, f"{where}.{fname}", warnings)
        if err:
            return None, err
        kwargs[fname] = value
    # An operation carrying fields its action does not take is a garbled one: an ADD with an
    # "old_memory" (or a "memory_changed") was meant to replace an entry, and reading it as an ADD
    # would store the replaced value as current. Say which keys and whose fields they are.
    extra = sorted(map(str, set(raw) - {key} - set(fields)))
    if extra:
        owners = [f"'{k[:40]}'" + (f" (a field of {_FIELD_OWNER[k]})" if k in _FIELD_OWNER else "") for k in extra[:4]]
        return None, f"{where}: {action} takes only {', '.join(map(repr, fields))}; it also carries {', '.join(owners)}"
    return cls(**kwargs), None


def parse(agent: str, text: Any) -> Parsed:
    """Parse one agent's raw output. Never raises on any ``text``; raises only on an unknown agent."""
    if agent not in ALLOWED_ACTIONS:
        raise ValueError(f"unknown agent {agent!r}; expected one of {AGENTS}")
    out = Parsed(agent=agent)
    if not isinstance(text, str):
        out.errors.append(f"output must be a string, got {type(text).__name__}")
        return out
    obj, err = first_json_object(clean_output(text))
    if obj is None:
        out.errors.append(err or "no JSON object found")
        return out

    if agent == "core":
        op, err = _build_op(agent, obj, "operation", "core", out.warnings)
        if err:
            out.errors.append(err)
        else:
            out.ops.append(op)
    else:
        raw_ops = obj.get("operations")
        if not isinstance(raw_ops, list):
            out.errors.append(f"{agent}: expected {{\"operations\": [...]}}, got keys {sorted(map(str, obj))[:5]}")
        else:
            for i, raw in enumerate(raw_ops):
                op, err = _build_op(agent, raw, "action", f"operations[{i}]", out.warnings)
                if err:
                    out.errors.append(err)
                else:
                    out.ops.append(op)
    out.valid = not out.errors
    return out


def op_to_dict(op: Op) -> dict[str, Any]:
    """The JSON form of an operation, as an agent would write it (used by experts and logs)."""
    key = "operation" if isinstance(op, (CoreAppend, CoreReplace, CoreRewrite)) else "action"
    fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in op.__dict__.items()}
    return {key: op.action, **fields}


def render_ops(agent: str, ops: list[Op]) -> str:
    """Serialise operations in the output format ``parse`` reads (the inverse of ``parse``)."""
    if agent == "core":
        if len(ops) != 1:
            raise ValueError("core writes exactly one operation")
        return json.dumps(op_to_dict(ops[0]), ensure_ascii=False)
    return json.dumps({"operations": [op_to_dict(op) for op in ops]}, ensure_ascii=False)


def quoted_texts(op: Op) -> list[str]:
    """What an edit quotes of the memory it changes: REPLACE's old text, UPDATE's and MERGE's old memories."""
    if isinstance(op, CoreReplace):
        return [op.old_text]
    if isinstance(op, Update):
        return [op.old_memory]
    if isinstance(op, Merge):
        return list(op.old_memories)
    return []


def entry_texts(ops: Sequence[Op]) -> list[str]:
    """Every text that entry operations write or quote: what applying them embeds."""
    texts: list[str] = []
    for op in ops:
        if isinstance(op, Add):
            texts.append(op.memory)
        elif isinstance(op, Update):
            texts += [op.new_memory, op.old_memory]
        elif isinstance(op, Merge):
            texts += [op.new_memory, *op.old_memories]
    return texts


def written_text(ops: list[Op]) -> str:
    """The new text a list of operations writes, joined by newlines (what length penalties measure)."""
    parts = []
    for op in ops:
        if isinstance(op, (CoreAppend, CoreRewrite)):
            parts.append(op.content)
        elif isinstance(op, CoreReplace):
            parts.append(op.new_text)
        elif isinstance(op, Add):
            parts.append(op.memory)
        elif isinstance(op, (Update, Merge)):
            parts.append(op.new_memory)
    return "\n".join(parts)
