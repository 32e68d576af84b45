"""The structured user world of AMemGym as typed records.

A ``World`` is a list of ``WorldUser``s. Each user has a ``Profile``, a state schema (variable ->
its possible values), ``Period``s (period 0 exposes the initial state, later periods hold the
changes), each with ``WorldSession``s in which the user reveals some state values, and
``Question``s whose correct answer depends on the current values of 2-3 variables.

Field names follow AMemGym's ``data.json`` (protocols §4). Keys we do not know are kept in
``extra`` of the record they came from, so a read-then-write loses nothing.

``VariableInfo`` is ours: how to talk about a variable (a readable name, its domain, whether it
is a routine with steps). Generated worlds carry it under the user key ``variable_info``; worlds
read from elsewhere may lack it, and everything that uses it falls back to the variable name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


class WorldError(ValueError):
    """A world file or record that does not hold together; ``issues`` says what and where."""

    def __init__(self, issues: list[str] | str):
        self.issues = [issues] if isinstance(issues, str) else list(issues)
        shown = self.issues[:20]
        more = f"\n... and {len(self.issues) - 20} more" if len(self.issues) > 20 else ""
        super().__init__("\n".join(shown) + more)


@dataclass
class Profile:
    uuid: str | None
    name: str
    age: int | None = None
    gender: str | None = None
    marital_status: str | None = None
    education_level: str | None = None
    occupation: str | None = None
    hobbies_and_interests: str | None = None
    skills_and_expertise: str | None = None
    complementary_info: str | None = None
    formatted_str: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def first_name(self) -> str:
        return self.name.split()[0] if self.name.strip() else "The user"


@dataclass
class VariableInfo:
    """How to talk about one state variable; values map a raw value to readable text."""

    title: str  # "Coffee brewing method"
    domain: str = "general"
    kind: str = "state"  # "state" | "routine" (routines also get Procedural memory)
    values: dict[str, str] = field(default_factory=dict)  # raw value -> "pour-over with a gooseneck kettle"
    steps: dict[str, list[str]] = field(default_factory=dict)  # routine value -> its steps
    context: str | None = None  # routines: when the routine applies
    ask: str | None = None  # a first-person question about the variable ("How do I make my coffee?")

    def question(self) -> str:
        return self.ask or f"What is my {self.title.lower()} now?"

    def text(self, value: str | None) -> str:
        if value is None:
            return "unknown"
        return self.values.get(value) or value.replace("_", " ")


@dataclass
class Turn:
    """One message of a recorded session."""

    role: str
    content: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class WorldSession:
    event: str | None  # the life event behind the change the session reveals (None in period 0)
    exposed_states: dict[str, str]
    query: str  # the user's opening request, revealing exposed_states without naming them
    session_time: str  # "YYYY-MM-DD HH:MM:SS"
    messages: list[Turn] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def date(self) -> str:
        return self.session_time[:10]


@dataclass
class StateUpdate:
    old: str | None
    new: str


@dataclass
class Period:
    period_start: str | None
    period_end: str
    period_summary: str | None
    sessions: list[WorldSession]
    state: dict[str, str]  # every variable's value at the end of the period
    updates: dict[str, StateUpdate]
    update_cnts: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnswerChoice:
    state: list[str]  # values of the question's required_info, in order
    answer: str
    type: str = "experience"  # "experience" (the user lived it) | "random" (a distractor)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Question:
    query: str
    required_info: list[str]
    answer_choices: list[AnswerChoice]
    extra: dict[str, Any] = field(default_factory=dict)

    def correct_choice(self, state: dict[str, str]) -> int | None:
        """Index of the choice matching the current values of the required variables."""
        want = [state.get(v) for v in self.required_info]
        for i, choice in enumerate(self.answer_choices):
            if list(choice.state) == want:
                return i
        return None


@dataclass
class SessionRef:
    """Where a session sits in a user's timeline."""

    period: int
    index: int  # position inside the period
    session: WorldSession

    @property
    def id(self) -> str:
        return f"p{self.period}-s{self.index}"


_SESSION_ID = re.compile(r"(?:^|/)p(\d+)-s\d+$")


def session_id_period(key: str) -> int | None:
    """The period a world session's id (``SessionRef.id``, alone or ending a ``<user>/<id>`` key) names;
    None for a key of any other form, such as a benchmark's session."""
    m = _SESSION_ID.search(key)
    return int(m.group(1)) if m else None


@dataclass
class WorldUser:
    id: str
    start_time: str
    user_profile: Profile
    state_schema: dict[str, list[str]]
    periods: list[Period]
    qas: list[Question]
    variable_info: dict[str, VariableInfo] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def info(self, variable: str) -> VariableInfo:
        """How to talk about ``variable``; a plain fallback when the world carries no info."""
        found = self.variable_info.get(variable)
        if found is not None:
            return found
        return VariableInfo(title=variable.replace("_", " ").capitalize())

    def sessions(self) -> list[SessionRef]:
        """All sessions in time order, with their period and position."""
        return [SessionRef(p, i, s) for p, period in enumerate(self.periods) for i, s in enumerate(period.sessions)]

    def state_at(self, period: int) -> dict[str, str]:
        return dict(self.periods[period].state)

    def where(self, period: int | None = None, session: int | None = None, field_name: str | None = None) -> str:
        """A location string for error messages."""
        parts = [f"user {self.id} ({self.user_profile.name})"]
        if period is not None:
            parts.append(f"period {period}")
        if session is not None:
            parts.append(f"session {session}")
        if field_name is not None:
            parts.append(f"field '{field_name}'")
        return ", ".join(parts)


@dataclass
class World:
    users: list[WorldUser]

    def __len__(self) -> int:
        return len(self.users)

    def __iter__(self):
        return iter(self.users)

    def __getitem__(self, index: int) -> WorldUser:
        return self.users[index]

    def user(self, key: int | str) -> WorldUser:
        """A user by position or by id."""
        if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
            idx = int(key)
            if not 0 <= idx < len(self.users):
                raise KeyError(f"world has {len(self.users)} users; no user {idx}")
            return self.users[idx]
        for u in self.users:
            if u.id == key:
                return u
        raise KeyError(f"world has no user with id {key!r}")
