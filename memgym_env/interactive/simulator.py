"""Simulated users for ``MemoryGym-Interactive-v0``: who says what in each session.

A session starts with the world's opening query (it reveals the session's ``exposed_states``
without naming them) and runs a fixed number of rounds. Follow-ups keep the conversation going
and never reveal schema values:

| simulator | follow-ups |
|---|---|
| ``TemplateSimulator`` | the world's own recorded user turns (the life event in the user's words, then generic follow-ups); past them, a seeded pick of the catalog's follow-ups. Offline, free. It never reads the assistant's replies, so an "on-policy" run with it is on-policy only in the assistant's own turns (reports say so) |
| ``LLMSimulator`` | a chat model given the profile, the date and the whole conversation so far (the assistant's replies included), told not to reveal values; a line that names a schema value is replaced by a template follow-up |
| ``ReplaySimulator`` | the user turns recorded by another run (off-policy) |

Rounds per session: the number of user turns in the world's recorded messages, else 1 for
period 0 and 2 for update periods (AMemGym's base setting).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from membuilder import prompts
from membuilder.agents.assistant import bound
from membuilder.llm.base import Sampling
from memgym_env.world.catalog import load_catalog
from memgym_env.world.types import SessionRef, WorldUser

TIME_PREFIX = re.compile(r"^\[Current Time: [^\]]*\]\s*")
DEFAULT_ROUNDS = (1, 2)  # (period 0, update periods)


class Simulator(Protocol):
    def rounds(self, user: WorldUser, ref: SessionRef) -> int: ...

    def opening(self, user: WorldUser, ref: SessionRef) -> str: ...

    def follow_up(self, user: WorldUser, ref: SessionRef, round_: int, history: Sequence[Mapping[str, str]]) -> str: ...


def recorded_user_turns(ref: SessionRef) -> list[str]:
    return [t.content for t in ref.session.messages if t.role == "user"]


def _generic_follow_ups() -> tuple[str, ...]:
    return load_catalog().dialogue.follow_ups


class TemplateSimulator:
    """Offline follow-ups from the world's own phrasings; ``seed`` picks the generic ones."""

    reads_replies = False  # the follow-ups do not depend on what the assistant said

    def __init__(self, seed: int = 0):
        self.seed = seed

    def rounds(self, user: WorldUser, ref: SessionRef) -> int:
        return len(recorded_user_turns(ref)) or DEFAULT_ROUNDS[ref.period > 0]

    def opening(self, user: WorldUser, ref: SessionRef) -> str:
        return ref.session.query

    def follow_up(self, user: WorldUser, ref: SessionRef, round_: int, history: Sequence[Mapping[str, str]]) -> str:
        turns = recorded_user_turns(ref)
        if round_ < len(turns):
            return turns[round_]
        rng = random.Random(f"memgym-sim-{self.seed}-{user.id}-{ref.id}-{round_}")
        return rng.choice(_generic_follow_ups())


def value_phrases(user: WorldUser) -> list[str]:
    """Readable texts of every schema value (what a follow-up must not say outright)."""
    out = []
    for var, values in user.state_schema.items():
        info = user.info(var)
        out += [info.text(v).lower() for v in values if len(info.text(v)) >= 6]
    return out


class LLMSimulator:
    """Follow-ups written by ``model`` (greedy, so the same conversation gives the same line),
    conditioned on the whole conversation so far, its newest ``MAX_HISTORY_CHARS`` characters."""

    reads_replies = True
    MAX_HISTORY_CHARS = 4000

    def __init__(self, model, seed: int = 0, max_new_tokens: int = 48):
        self.model = bound(model, "simulate")
        self.template = TemplateSimulator(seed)
        self.max_new_tokens = max_new_tokens
        self.replaced = 0  # follow-ups dropped for naming a value or being empty

    def rounds(self, user: WorldUser, ref: SessionRef) -> int:
        return self.template.rounds(user, ref)

    def opening(self, user: WorldUser, ref: SessionRef) -> str:
        return ref.session.query

    def follow_up(self, user: WorldUser, ref: SessionRef, round_: int, history: Sequence[Mapping[str, str]]) -> str:
        lines = [f"{'You' if m['role'] == 'user' else 'Assistant'}: {TIME_PREFIX.sub('', m['content'])}"
                 for m in history]
        kept: list[str] = []
        for line in reversed(lines):  # the newest messages that fit
            if kept and sum(len(x) + 1 for x in kept) + len(line) > self.MAX_HISTORY_CHARS:
                break
            kept.insert(0, line)
        prompt = prompts.render("simulate_user", profile=user.user_profile.formatted_str or user.user_profile.name,
                                date=ref.session.date, conversation="\n".join(kept) or "(none)")
        text = self.model.generate([[{"role": "user", "content": prompt}]],
                                   Sampling(temperature=0.0, max_new_tokens=self.max_new_tokens))[0].text
        line = " ".join(text.strip().strip('"').split())
        if not line or any(p in line.lower() for p in value_phrases(user)):
            self.replaced += 1
            return self.template.follow_up(user, ref, round_, history)
        return line


class ReplaySimulator:
    """The user turns another run recorded: ``sessions`` maps a session id to its messages."""

    reads_replies = False

    def __init__(self, sessions: Mapping[str, Sequence[Mapping[str, str]]]):
        self.sessions = sessions

    def _turns(self, user: WorldUser, ref: SessionRef) -> list[str]:
        key = f"{user.id}/{ref.id}"
        if key not in self.sessions:
            raise KeyError(f"replay: no recorded session {ref.id} for user {user.id}")
        return [TIME_PREFIX.sub("", m["content"], count=1) if i == 0 else m["content"]
                for i, m in enumerate(m for m in self.sessions[key] if m["role"] == "user")]

    def rounds(self, user: WorldUser, ref: SessionRef) -> int:
        return len(self._turns(user, ref))

    def opening(self, user: WorldUser, ref: SessionRef) -> str:
        return self._turns(user, ref)[0]

    def follow_up(self, user: WorldUser, ref: SessionRef, round_: int, history: Sequence[Mapping[str, str]]) -> str:
        return self._turns(user, ref)[round_]


def reads_replies(kind: str) -> bool:
    """Whether the simulator named ``kind`` writes the user's turns from the assistant's replies."""
    return {"template": TemplateSimulator, "llm": LLMSimulator}[kind].reads_replies


def make_simulator(kind: str, model=None, seed: int = 0) -> Simulator:
    if kind == "template":
        return TemplateSimulator(seed)
    if kind == "llm":
        if model is None:
            raise ValueError("the llm simulator needs a chat model")
        return LLMSimulator(model, seed)
    raise ValueError(f"unknown simulator {kind!r}; expected 'template' or 'llm'")
