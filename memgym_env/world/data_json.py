"""Read and write AMemGym's ``data.json`` (a JSON list of users) without loss.

Known fields become typed records; unknown keys ride along in each record's ``extra`` and are
written back after the known ones. The writer uses one fixed layout (known keys in the official
order, ``indent=1``, UTF-8 kept as is), so a file is byte-for-byte stable after one normalising
write; the published example is already in that layout and comes back unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from membuilder.plumbing.json_files import JSONLimitError, atomic_write_text, load_json_file
from memgym_env.world.types import (
    AnswerChoice,
    Period,
    Profile,
    Question,
    StateUpdate,
    Turn,
    VariableInfo,
    World,
    WorldError,
    WorldSession,
    WorldUser,
)

_PROFILE_KEYS = ("uuid", "name", "age", "gender", "marital_status", "education_level", "occupation",
                 "hobbies_and_interests", "skills_and_expertise", "complementary_info", "formatted_str")
_USER_KEYS = ("id", "start_time", "user_profile", "state_schema", "periods", "qas", "variable_info")
_PERIOD_KEYS = ("period_start", "period_end", "period_summary", "sessions", "state", "updates", "update_cnts")
_SESSION_KEYS = ("event", "exposed_states", "query", "messages", "session_time")
_QA_KEYS = ("query", "required_info", "answer_choices")
_CHOICE_KEYS = ("state", "answer", "type")
_TURN_KEYS = ("role", "content")


def _extra(data: dict, known: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in known}


class _Faulty(dict):
    """Stands in for an object that was the wrong type, so reading goes on without a cascade of
    'missing field' faults under it."""


class _Reader:
    """Turns one user dict into a ``WorldUser``, naming the record of any fault. With a ``faults``
    list, every fault is appended there and reading goes on with a stand-in value (so
    ``memgym world validate`` lists them all); without, the first fault raises ``WorldError``."""

    def __init__(self, source: str, index: int, faults: list[str] | None = None):
        self.source = source
        self.index = index
        self.label = f"user {index}"
        self.faults = faults
        self.found = 0  # faults of this user

    def fail(self, where: str, msg: str) -> WorldError:
        return WorldError(f"{self.source}: {self.label}{where}: {msg}")

    def fault(self, where: str, msg: str, stand_in: Any = None) -> Any:
        if self.faults is None:
            raise self.fail(where, msg)
        self.found += 1
        self.faults.append(str(self.fail(where, msg)))
        return stand_in

    def get(self, data: Any, key: str, kinds: tuple[type, ...], where: str, required: bool = True) -> Any:
        stand_in = _Faulty() if kinds[0] is dict else kinds[0]() if kinds[0] in (str, list) else None
        if isinstance(data, _Faulty):
            return stand_in
        if not isinstance(data, dict):
            return self.fault(where, f"expected an object, got {type(data).__name__}", stand_in)
        if key not in data:
            if required:
                return self.fault(where, f"missing field '{key}'", stand_in)
            return None
        value = data[key]
        if value is None and not required:
            return None
        if not isinstance(value, kinds) or (int in kinds and isinstance(value, bool)):
            names = "/".join(k.__name__ for k in kinds)
            return self.fault(where, f"field '{key}' must be {names}, got {type(value).__name__}", stand_in)
        return value

    def str_map(self, value: Any, where: str, key: str) -> dict[str, str]:
        if isinstance(value, _Faulty):
            return {}
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            return self.fault(where, f"field '{key}' must map variable names to string values", {})
        return dict(value)

    def str_list(self, value: list, where: str, message: str) -> list[str]:
        if not all(isinstance(v, str) for v in value):
            return self.fault(where, message, [])
        return list(value)

    def user(self, data: Any) -> WorldUser | None:
        if not isinstance(data, dict):
            return self.fault("", f"expected an object, got {type(data).__name__}")
        uid = data.get("id")
        if uid is not None:
            self.label = f"user {self.index} (id {uid})"
        p = self.get(data, "user_profile", (dict,), "")
        profile = Profile(
            uuid=self.get(p, "uuid", (str,), ", user_profile", required=False),
            name=self.get(p, "name", (str,), ", user_profile"),
            age=self.get(p, "age", (int,), ", user_profile", required=False),
            **{k: self.get(p, k, (str,), ", user_profile", required=False) for k in _PROFILE_KEYS[3:]},
            extra=_extra(p, _PROFILE_KEYS),
        )
        schema_raw = self.get(data, "state_schema", (dict,), "")
        schema: dict[str, list[str]] = {}
        for var, values in schema_raw.items():
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                self.fault(f", state_schema['{var}']", "values must be a list of strings")
                continue
            schema[var] = list(values)
        periods = [self.period(pd, i) for i, pd in enumerate(self.get(data, "periods", (list,), ""))]
        qas = [self.question(q, i) for i, q in enumerate(self.get(data, "qas", (list,), ""))]
        info_raw = self.get(data, "variable_info", (dict,), "", required=False) or {}
        info = {var: self.variable_info(var, v) for var, v in info_raw.items()}
        return WorldUser(
            id=str(uid) if uid is not None else str(profile.uuid or self.index),
            start_time=self.get(data, "start_time", (str,), "", required=False) or "",
            user_profile=profile,
            state_schema=schema,
            periods=periods,
            qas=qas,
            variable_info=info,
            extra=_extra(data, _USER_KEYS),
        )

    def variable_info(self, var: str, v: Any) -> VariableInfo:
        where = f", variable_info['{var}']"
        return VariableInfo(
            title=self.get(v, "title", (str,), where),
            domain=self.get(v, "domain", (str,), where, required=False) or "general",
            kind=self.get(v, "kind", (str,), where, required=False) or "state",
            values=self.str_map(self.get(v, "values", (dict,), where, required=False) or {}, where, "values"),
            steps={k: self.str_list(s if isinstance(s, list) else [None], f"{where}, steps['{k}']",
                                    "must be a list of strings")
                   for k, s in (self.get(v, "steps", (dict,), where, required=False) or {}).items()},
            context=self.get(v, "context", (str,), where, required=False),
            ask=self.get(v, "ask", (str,), where, required=False),
        )

    def period(self, data: Any, i: int) -> Period:
        where = f", period {i}"
        sessions = [self.session(s, i, j) for j, s in enumerate(self.get(data, "sessions", (list,), where))]
        updates = {}
        for var, up in (self.get(data, "updates", (dict,), where, required=False) or {}).items():
            uw = f"{where}, updates['{var}']"
            new = self.get(up, "new", (str,), uw)
            updates[var] = StateUpdate(old=self.get(up, "old", (str,), uw, required=False), new=new)
        cnts = self.get(data, "update_cnts", (dict,), where, required=False) or {}
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in cnts.values()):
            cnts = self.fault(where, "field 'update_cnts' must map variable names to integers", {})
        return Period(
            period_start=self.get(data, "period_start", (str,), where, required=False),
            period_end=self.get(data, "period_end", (str,), where),
            period_summary=self.get(data, "period_summary", (str,), where, required=False),
            sessions=sessions,
            state=self.str_map(self.get(data, "state", (dict,), where), where, "state"),
            updates=updates,
            update_cnts=dict(cnts),
            extra=_extra(data, _PERIOD_KEYS),
        )

    def session(self, data: Any, i: int, j: int) -> WorldSession:
        where = f", period {i}, session {j}"
        turns = []
        for k, m in enumerate(self.get(data, "messages", (list,), where, required=False) or []):
            mw = f"{where}, messages[{k}]"
            turns.append(Turn(self.get(m, "role", (str,), mw), self.get(m, "content", (str,), mw), _extra(m, _TURN_KEYS)))
        return WorldSession(
            event=self.get(data, "event", (str,), where, required=False),
            exposed_states=self.str_map(self.get(data, "exposed_states", (dict,), where), where, "exposed_states"),
            query=self.get(data, "query", (str,), where),
            session_time=self.get(data, "session_time", (str,), where),
            messages=turns,
            extra=_extra(data, _SESSION_KEYS),
        )

    def question(self, data: Any, i: int) -> Question:
        where = f", qas[{i}]"
        required = self.str_list(self.get(data, "required_info", (list,), where), where,
                                 "field 'required_info' must be a list of variable names")
        choices = []
        for k, c in enumerate(self.get(data, "answer_choices", (list,), where)):
            cw = f"{where}, answer_choices[{k}]"
            state = self.str_list(self.get(c, "state", (list,), cw), cw, "field 'state' must be a list of strings")
            choices.append(AnswerChoice(state=list(state), answer=self.get(c, "answer", (str,), cw),
                                        type=self.get(c, "type", (str,), cw, required=False) or "experience",
                                        extra=_extra(c, _CHOICE_KEYS)))
        return Question(query=self.get(data, "query", (str,), where), required_info=list(required),
                        answer_choices=choices, extra=_extra(data, _QA_KEYS))


def user_from_dict(data: Any, index: int = 0, source: str = "world") -> WorldUser:
    return _Reader(source, index).user(data)


def world_from_list(data: Any, source: str = "world", faults: list[str] | None = None) -> World:
    """The users of a data.json list. With ``faults``, every fault is listed there and only the
    users without any are returned; without, the first fault raises ``WorldError``."""
    if not isinstance(data, list):
        raise WorldError(f"{source}: a data.json holds a list of users, got {type(data).__name__}")
    users = []
    for i, u in enumerate(data):
        reader = _Reader(source, i, faults)
        user = reader.user(u)
        if not reader.found:
            users.append(user)
    return World(users)


def read_world(path: str | Path, faults: list[str] | None = None) -> World:
    """Read a ``data.json``-style world file (a list of users); ``faults``: see ``world_from_list``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such world file")
    try:
        data = load_json_file(path)
    except JSONLimitError as exc:
        raise WorldError(str(exc)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WorldError(f"{path}: not valid JSON ({exc})") from exc
    return world_from_list(data, source=str(path), faults=faults)


def _info_to_dict(info: VariableInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"title": info.title, "domain": info.domain, "kind": info.kind, "values": dict(info.values)}
    if info.steps:
        out["steps"] = {k: list(v) for k, v in info.steps.items()}
    if info.context is not None:
        out["context"] = info.context
    if info.ask is not None:
        out["ask"] = info.ask
    return out


def user_to_dict(user: WorldUser) -> dict[str, Any]:
    p = user.user_profile
    profile = {k: getattr(p, k) for k in _PROFILE_KEYS} | p.extra
    periods = []
    for period in user.periods:
        sessions = [
            {
                "event": s.event,
                "exposed_states": dict(s.exposed_states),
                "query": s.query,
                "messages": [{"role": t.role, "content": t.content} | t.extra for t in s.messages],
                "session_time": s.session_time,
            } | s.extra
            for s in period.sessions
        ]
        periods.append({
            "period_start": period.period_start,
            "period_end": period.period_end,
            "period_summary": period.period_summary,
            "sessions": sessions,
            "state": dict(period.state),
            "updates": {v: {"old": u.old, "new": u.new} for v, u in period.updates.items()},
            "update_cnts": dict(period.update_cnts),
        } | period.extra)
    qas = [
        {
            "query": q.query,
            "required_info": list(q.required_info),
            "answer_choices": [{"state": list(c.state), "answer": c.answer, "type": c.type} | c.extra
                               for c in q.answer_choices],
        } | q.extra
        for q in user.qas
    ]
    out: dict[str, Any] = {
        "id": user.id,
        "start_time": user.start_time,
        "user_profile": profile,
        "state_schema": {k: list(v) for k, v in user.state_schema.items()},
        "periods": periods,
        "qas": qas,
    }
    if user.variable_info:  # ours, not part of the official format: written only when present
        out["variable_info"] = {k: _info_to_dict(v) for k, v in user.variable_info.items()}
    return out | user.extra


def dumps_world(world: World) -> str:
    """The normalised text of a world file (the layout of the published example)."""
    return json.dumps([user_to_dict(u) for u in world.users], ensure_ascii=False, indent=1)


def write_world(world: World, path: str | Path) -> None:
    """Write atomically: a crash mid-write leaves the old file in place."""
    atomic_write_text(path, dumps_world(world))
