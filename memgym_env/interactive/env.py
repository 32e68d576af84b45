"""``MemoryGym-Interactive-v0``: an assistant talks with a simulated user whose life changes,
and is examined after every period (AMemGym, protocols §4)."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from membuilder.memory.ops import first_json_object
from memgym_env.interactive.simulator import Simulator, make_simulator
from memgym_env.spaces import FreeText
from memgym_env.world import WorldConfig, generate_world, read_world
from memgym_env.world.types import World, WorldError, WorldUser

MESSAGE, QUESTION, PROBE = 0, 1, 2
KINDS = ("message", "question", "probe")
_LEADING_NUMBER = re.compile(r"^\s*(?:option\s*)?\(?\s*(\d+)\b", re.IGNORECASE)


def parse_answer(text: Any, n_choices: int) -> int | None:
    """0-based option named by ``{"answer": n}`` or a reply that starts with the number n; else None."""
    if not isinstance(text, str):
        return None
    obj, _ = first_json_object(text)
    value: Any = obj.get("answer") if isinstance(obj, dict) else None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not (isinstance(value, int) and not isinstance(value, bool)):
        m = _LEADING_NUMBER.match(text) if obj is None else None
        value = int(m.group(1)) if m else None
    return value - 1 if value is not None and 1 <= value <= n_choices else None


def choice_or_random(text: Any, n_choices: int, key: str) -> tuple[int, bool]:
    """(0-based choice, parsed): an unparseable answer is a random choice seeded by ``key`` (AMemGym)."""
    choice = parse_answer(text, n_choices)
    if choice is not None:
        return choice, True
    return random.Random(f"memgym-answer-{key}").randrange(n_choices), False


def render_choices(question: str, choices: list[str]) -> str:
    return question + "\n" + "\n".join(f"{i}. {c}" for i, c in enumerate(choices, 1))


@dataclass
class EvalItem:
    kind: int  # QUESTION or PROBE
    id: str  # "q3" (question index) or "v:<variable>"
    question: str
    choices: list[str]
    correct: int
    required_info: list[str] = field(default_factory=list)  # questions: the variables it depends on

    def public(self) -> dict[str, Any]:
        """What an assistant may see: no correct index."""
        return {"kind": KINDS[self.kind], "id": self.id, "question": self.question, "choices": list(self.choices)}


def eval_items(user: WorldUser, period: int, probes: bool = True) -> list[EvalItem]:
    """The period's multiple-choice questions, then one probe per required variable."""
    state = user.periods[period].state
    items = []
    for q, question in enumerate(user.qas):
        correct = question.correct_choice(state)
        if correct is None:
            raise WorldError(f"{user.where(period=period)}: qas[{q}] has no answer choice for the state "
                             f"{[state.get(v) for v in question.required_info]} of {question.required_info}")
        items.append(EvalItem(QUESTION, f"q{q}", question.query, [c.answer for c in question.answer_choices],
                              correct, list(question.required_info)))
    if probes:
        variables = list(dict.fromkeys(v for q in user.qas for v in q.required_info))
        for var in variables:
            info, values = user.info(var), list(user.state_schema[var])
            items.append(EvalItem(PROBE, f"v:{var}", f"Which best describes the user's {info.title.lower()} now?",
                                  [info.text(v) for v in values], values.index(state[var])))
    return items


def load_world(world: World | str | Path | None) -> World:
    if isinstance(world, World):
        return world
    if world is None:  # a small offline world, so gym.make works with no arguments
        return generate_world(WorldConfig(num_users=1, num_periods=2, num_questions=3, changes_per_period=2))
    return read_world(world)


class InteractiveEnv(gym.Env):
    """
    ## Description
    One episode is one user of a world (AMemGym, protocols §4). The simulated user opens each
    session with ``[Current Time: <session time>]`` and a request that reveals some of their
    current state without naming it, then follows up for a fixed number of rounds. After the last
    session of every period (period 0 included) the assistant answers every question of the user
    as multiple choice, then one probe per state variable (which value holds now), used for the
    write/read/utilization diagnosis.

    ## Action Space
    A ``str`` (``FreeText``): the reply to the last user message, or, for a question or probe,
    ``{"answer": n}`` or a reply starting with the option number n (1-based). Anything else
    counts as a uniformly random choice, seeded by the episode seed and the item, and flagged in
    ``info["answer"]["parsed"] = False``.

    ## Observation Space
    A ``Dict``:

    | key | space | holds |
    |-----|-------|-------|
    | ``kind`` | ``Discrete(3)`` | 0 user message, 1 question, 2 probe |
    | ``text`` | ``FreeText`` | the message, or the question with its numbered options |
    | ``time`` | ``FreeText`` | session time, or the period's end date for questions and probes |
    | ``period`` | ``Discrete(P)`` | current period, P = most periods of any user |

    ## Rewards
    1 for a correct answer to a question, 0 otherwise (messages and probes give 0).

    ## Starting State
    The opening message of the first session of ``options["start_period"]`` (default 0) of user
    ``options["user"]`` (index or id; default the constructor's ``user``).

    ## Episode End
    1. Termination: the last probe of the user's last period is answered.
    2. Truncation: none (wrap with ``TimeLimit`` to bound an episode).

    ## Info
    Every step: ``user``, ``period``, ``kind``, ``session_id``, ``true_state`` (every variable's
    value this period), ``exposed_states`` (what the open session reveals). When a session ends:
    ``session_end`` = {id, period, time, exposed_states, messages}. Before the first question of a
    period: ``evaluation`` = the period's items without answers. After an answer: ``answer`` =
    {id, kind, choice, parsed, correct_index, correct, variable?}. After the period's last item:
    ``period_end`` = the period.

    ## Arguments
    | name | type | default | meaning |
    |------|------|---------|---------|
    | ``world`` | ``World``, path or None | None | the world (None: a 1-user, 2-period offline world) |
    | ``user`` | int or str | 0 | default user |
    | ``simulator`` | "template", "llm" or a ``Simulator`` | "template" | who writes the user's turns |
    | ``simulator_model`` | ``ChatModel`` | None | model of the "llm" simulator |
    | ``probes`` | bool | True | ask the diagnosis probes |
    | ``seed`` | int | 0 | seed used when ``reset`` gets none (random choices, template follow-ups) |

    >>> import gymnasium as gym, memgym_env
    >>> env = gym.make("MemoryGym-Interactive-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs["text"].startswith("[Current Time: ")
    True

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, world: World | str | Path | None = None, user: int | str = 0,
                 simulator: str | Simulator = "template", simulator_model: Any = None, probes: bool = True,
                 seed: int = 0, render_mode: str | None = None):
        self.world = load_world(world)
        if not len(self.world):
            raise WorldError("interactive env: the world has no users")
        self.default_user = user
        self.simulator = make_simulator(simulator, simulator_model, seed) if isinstance(simulator, str) else simulator
        self.probes = probes
        self.base_seed = seed
        self.render_mode = render_mode
        periods = max(len(u.periods) for u in self.world)
        self.observation_space = spaces.Dict({"kind": spaces.Discrete(3), "text": FreeText(), "time": FreeText(),
                                              "period": spaces.Discrete(periods)})
        self.action_space = FreeText()

    # ---- episode state -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        self.user = self.world.user(options.get("user", self.default_user))
        start = int(options.get("start_period", 0))
        if not 0 <= start < len(self.user.periods):
            raise ValueError(f"reset: start_period {start} is outside 0..{len(self.user.periods) - 1} "
                             f"for {self.user.where()}")
        self.seed_used = self.base_seed if seed is None else seed
        self.done = False
        extra = self._enter_period(start)
        return self._obs(), self._info(extra)

    def _enter_period(self, period: int) -> dict[str, Any]:
        self.period = period
        self.refs = [r for r in self.user.sessions() if r.period == period]
        self.session_idx, self.items, self.item_idx = 0, [], 0
        if self.refs:
            self._open_session()
            return {}
        return self._open_evaluation()

    def _open_session(self) -> None:
        ref = self.refs[self.session_idx]
        self.round, self.rounds = 0, max(1, self.simulator.rounds(self.user, ref))
        opening = f"[Current Time: {ref.session.session_time}] {self.simulator.opening(self.user, ref)}"
        self.history = [{"role": "user", "content": opening}]

    def _open_evaluation(self) -> dict[str, Any]:
        self.items, self.item_idx = eval_items(self.user, self.period, self.probes), 0
        return {"evaluation": [it.public() for it in self.items]}

    @property
    def phase(self) -> str:
        return "done" if self.done else ("evaluate" if self.items else "talk")

    def _obs(self) -> dict[str, Any]:
        if self.phase == "talk":
            ref = self.refs[self.session_idx]
            return {"kind": MESSAGE, "text": self.history[-1]["content"], "time": ref.session.session_time,
                    "period": self.period}
        end = self.user.periods[self.period].period_end
        if self.phase == "evaluate":
            it = self.items[self.item_idx]
            return {"kind": it.kind, "text": render_choices(it.question, it.choices), "time": end, "period": self.period}
        return {"kind": MESSAGE, "text": "", "time": end, "period": self.period}

    def _info(self, extra: dict[str, Any]) -> dict[str, Any]:
        talking = self.phase == "talk"
        ref = self.refs[self.session_idx] if talking else None
        return {"user": self.user.id, "period": self.period, "kind": KINDS[self._obs()["kind"]],
                "session_id": ref.id if ref else None, "true_state": dict(self.user.periods[self.period].state),
                "exposed_states": dict(ref.session.exposed_states) if ref else {}, **extra}

    # ---- one step: the assistant's action moves the conversation or the examination on --------
    def step(self, action: Any):
        if self.done:
            raise RuntimeError("step after the episode ended; call reset()")
        if not isinstance(action, str):
            raise TypeError(f"action must be a str (a reply or an answer), got {type(action).__name__}")
        reward, extra = 0.0, {}
        if self.phase == "talk":
            extra = self._talk(action)
        else:
            reward, extra = self._examine(action)
        return self._obs(), reward, self.done, False, self._info(extra)

    def _talk(self, reply: str) -> dict[str, Any]:
        ref = self.refs[self.session_idx]
        self.history.append({"role": "assistant", "content": reply})
        self.round += 1
        if self.round < self.rounds:
            line = self.simulator.follow_up(self.user, ref, self.round, self.history)
            self.history.append({"role": "user", "content": line})
            return {}
        ended = {"session_end": {"id": ref.id, "period": self.period, "time": ref.session.session_time,
                                 "exposed_states": dict(ref.session.exposed_states), "messages": self.history}}
        self.session_idx += 1
        if self.session_idx < len(self.refs):
            self._open_session()
            return ended
        return ended | self._open_evaluation()

    def _examine(self, action: str) -> tuple[float, dict[str, Any]]:
        it = self.items[self.item_idx]
        choice, parsed = choice_or_random(action, len(it.choices), f"{self.seed_used}-{self.user.id}-{self.period}-{it.id}")
        correct = choice == it.correct
        answer = {"id": it.id, "kind": KINDS[it.kind], "choice": choice, "parsed": parsed,
                  "correct_index": it.correct, "correct": correct, "n_choices": len(it.choices)}
        if it.kind == PROBE:
            answer["variable"] = it.id[2:]
        else:
            answer["required_info"] = list(it.required_info)
        extra: dict[str, Any] = {"answer": answer}
        self.item_idx += 1
        if self.item_idx == len(self.items):
            extra["period_end"] = self.period
            if self.period + 1 < len(self.user.periods):
                extra |= self._enter_period(self.period + 1)
            else:
                self.done = True
        return float(correct and it.kind == QUESTION), extra

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        obs = self._obs()
        return f"[{KINDS[obs['kind']]} | period {obs['period']} | {obs['time']}]\n{obs['text']}"

    def interactions(self) -> list[dict[str, Any]]:
        """The open session's messages so far (a copy)."""
        return json.loads(json.dumps(self.history)) if self.phase == "talk" else []
