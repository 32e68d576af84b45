"""The oracle expert: the ideal output of each memory agent for every session of a world user.

Because the world says exactly which state values a session reveals (and the life event behind a
change), the expert can write what a perfect memory system would write, as the very JSON the four
agents emit (MemBuilder, protocols §1):

* Core: one line per variable, ``<Title>: <value> (since <date>)``. APPEND when a session only
  adds variables, REPLACE when it changes exactly one known line, REWRITE of the whole block when
  it does both or several changes at once (Core takes one operation per session). A session that
  reveals nothing new rewrites the block unchanged, a valid no-op.
* Semantic: ADD ``<Title>: <value> | Details: ...`` the first time a variable is revealed, UPDATE of
  the previous entry when it changes, with the date.
* Episodic: ADD ``<date>: <life event> | Details: ...`` for a session with an event; otherwise
  nothing (period 0 has no events).
* Procedural: ADD/UPDATE ``<description> | Steps: 1. ... | Context: ...`` for routine variables.

Nothing here calls a model, so expert trajectories for SFT cost nothing and are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from membuilder.memory.ops import AGENTS, Add, CoreAppend, CoreReplace, CoreRewrite, Op, Update, render_ops
from memgym_env.world.catalog import load_catalog
from memgym_env.world.types import SessionRef, VariableInfo, WorldUser


@dataclass
class ExpertStep:
    """The four agents' ideal outputs for one session."""

    session_id: str  # "p<period>-s<index>", as in ``user_to_conversation``
    period: int
    index: int
    session_time: str
    ops: dict[str, list[Op]]
    outputs: dict[str, str]  # agent -> the JSON text the agent should emit (``membuilder.memory.ops.parse`` accepts it)
    core_after: str  # the Core block once the Core output is applied
    revealed: dict[str, str] = field(default_factory=dict)  # variable -> value this session revealed


def variable_info(user: WorldUser, variable: str) -> VariableInfo:
    """The user's own info for ``variable``, else the catalog's (same name, same values), else a plain one."""
    if variable in user.variable_info:
        return user.variable_info[variable]
    spec = load_catalog().variables.get(variable)
    if spec is not None and set(user.state_schema.get(variable, ())) <= set(spec.values):
        return spec.info()
    return user.info(variable)


def core_line(info: VariableInfo, value: str, date: str) -> str:
    return f"{info.title}: {info.text(value)} (since {date})"


def semantic_text(info: VariableInfo, value: str, date: str, old: str | None, event: str | None) -> str:
    if old is None:
        details = f"First mentioned by the user on {date}."
    else:
        details = f"Changed on or before {date}; previously {info.text(old)}."
        if event:
            details += f" Reason: {event.rstrip('.')}."
    return f"{info.title}: {info.text(value)} | Details: {details}"


def procedural_text(info: VariableInfo, value: str, date: str) -> str | None:
    steps = info.steps.get(value)
    if info.kind != "routine" or not steps:
        return None
    numbered = " ".join(f"{i}. {s}." for i, s in enumerate(steps, 1))
    context = info.context or info.title.lower()
    return f"{info.title}: {info.text(value)} | Steps: {numbered} | Context: {context}; the user's way since {date}."


def episodic_text(event: str, date: str, changes: list[tuple[VariableInfo, str | None, str]]) -> str:
    parts = []
    for info, old, new in changes:
        if old is None:
            parts.append(f"{info.title.lower()} is {info.text(new)}")
        else:
            parts.append(f"{info.title.lower()} changed from {info.text(old)} to {info.text(new)}")
    return f"{date}: {event.rstrip('.')} | Details: As a result, " + "; ".join(parts) + "."


class OracleExpert:
    """Walks a user's sessions in order, remembering what the ideal memory already holds."""

    def __init__(self, user: WorldUser):
        self.user = user
        self.known: dict[str, str] = {}
        self.core_lines: dict[str, str] = {}
        self.semantic: dict[str, str] = {}
        self.procedural: dict[str, str] = {}

    def core_text(self) -> str:
        return "\n".join(self.core_lines.values())

    def step(self, ref: SessionRef) -> ExpertStep:
        s, date = ref.session, ref.session.date
        ops: dict[str, list[Op]] = {a: [] for a in AGENTS}
        new_vars, changed, episodic_changes = [], [], []
        old_core = dict(self.core_lines)
        for var, value in s.exposed_states.items():
            old = self.known.get(var)
            if old == value:
                continue  # already remembered: nothing to write
            info = variable_info(self.user, var)
            (new_vars if old is None else changed).append(var)
            episodic_changes.append((info, old, value))
            self.core_lines[var] = core_line(info, value, date)
            text = semantic_text(info, value, date, old, s.event)
            ops["semantic"].append(Add(text) if old is None else Update(self.semantic[var], text))
            self.semantic[var] = text
            proc = procedural_text(info, value, date)
            if proc is not None:
                prev = self.procedural.get(var)
                ops["procedural"].append(Add(proc) if prev is None else Update(prev, proc))
                self.procedural[var] = proc
            self.known[var] = value
        if s.event and episodic_changes:
            ops["episodic"].append(Add(episodic_text(s.event, date, episodic_changes)))

        block = self.core_text()
        if new_vars and not changed:
            ops["core"].append(CoreAppend("\n".join(self.core_lines[v] for v in new_vars)) if old_core
                               else CoreAppend(block))
        elif len(changed) == 1 and not new_vars:
            var = changed[0]
            ops["core"].append(CoreReplace(old_core[var], self.core_lines[var]))
        elif changed:
            ops["core"].append(CoreRewrite(block))
        elif block:
            ops["core"].append(CoreRewrite(block))  # nothing new: rewriting the same block changes nothing
        else:
            ops["core"].append(CoreAppend(f"No personal details shared yet (conversation on {date})."))
            block = ops["core"][0].content
            self.core_lines["_none"] = block
        outputs = {agent: render_ops(agent, agent_ops) for agent, agent_ops in ops.items()}
        return ExpertStep(session_id=ref.id, period=ref.period, index=ref.index, session_time=s.session_time,
                          ops=ops, outputs=outputs, core_after=block,
                          revealed={v: s.exposed_states[v] for v in new_vars + changed})


def expert_steps(user: WorldUser) -> list[ExpertStep]:
    """The oracle's outputs for every session of ``user``, in time order."""
    oracle = OracleExpert(user)
    return [oracle.step(ref) for ref in user.sessions()]
