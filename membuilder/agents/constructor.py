"""The MemBuilder constructor: one chat model playing the four memory agents.

For each session, all four agents see the same session and their own view of memory, and none
sees the others' output (MemBuilder, protocols §1). Their raw outputs are what the environment
scores and what ADRPO trains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from membuilder import prompts
from membuilder.llm.base import ChatMessages, ChatModel, Completion, Sampling
from membuilder.memory.core import CORE_LIMIT
from membuilder.ops import AGENTS

SYSTEM = "You are a careful memory-writing agent. You answer only with the JSON your instructions ask for."

# The observation keys a construction prompt reads (the env's observation dict carries them).
OBS_SESSION, OBS_TIME, OBS_CORE, OBS_CORE_USAGE = "session", "session_time", "core", "core_usage"


def build_observation(bank, session_text: str, session_time: str | None, view_k: int = 20) -> dict[str, Any]:
    """What the four agents see for a session: the session, Core, and each searchable agent's
    top-``view_k`` own-type entries (each line of the session is a query; best score wins).

    ``MemoryGym-v0`` and the trainer's datasets both build observations here, so the prompts a
    policy is trained on are the prompts it is scored with.
    """
    lines = [line for line in session_text.splitlines() if line.strip()]
    obs: dict[str, Any] = {OBS_SESSION: session_text, OBS_TIME: session_time or "", OBS_CORE: bank.core.text,
                           OBS_CORE_USAGE: min(100.0, bank.core.usage)}
    for agent in AGENTS[1:]:
        obs[agent] = tuple(h.entry.text for h in bank.session_view(agent, lines, view_k))
    return obs


def render_prompt(agent: str, obs: Mapping[str, Any]) -> ChatMessages:
    """The chat prompt of one agent for one observation of ``MemoryGym-v0``."""
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; expected one of {AGENTS}")
    values: dict[str, Any] = {
        "session": obs[OBS_SESSION],
        "session_time": obs.get(OBS_TIME) or "an unknown date",
        "core": obs.get(OBS_CORE) or "(empty)",
    }
    if agent == "core":
        values |= {"limit": CORE_LIMIT, "usage": f"{float(obs.get(OBS_CORE_USAGE, 0.0)):.0f}"}
    else:
        entries: Sequence[str] = obs.get(agent) or ()
        values["entries"] = "\n".join(f"{i}. {t}" for i, t in enumerate(entries, 1)) or "(none yet)"
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": prompts.render(f"construct_{agent}", **values)},
    ]


def render_prompts(obs: Mapping[str, Any]) -> dict[str, ChatMessages]:
    return {agent: render_prompt(agent, obs) for agent in AGENTS}


class MemBuilderPolicy:
    """Writes the four agents' outputs for observations with any ``ChatModel``.

    ``act`` handles many observations at once: all 4 x len(observations) prompts (times
    ``sampling.n`` samples) go to the model in one ``generate`` call.
    """

    def __init__(self, model: ChatModel, sampling: Sampling | None = None):
        self.model = model
        self.sampling = sampling or Sampling(temperature=0.0, max_new_tokens=384)

    def act_many(self, observations: Sequence[Mapping[str, Any]], n: int | None = None) -> list[list[dict[str, str]]]:
        """For each observation, ``n`` candidate actions (dicts agent -> raw output)."""
        n = n or self.sampling.n
        sampling = Sampling(**{**self.sampling.__dict__, "n": n})
        conversations = [render_prompt(a, obs) for obs in observations for a in AGENTS]
        completions: list[Completion] = self.model.generate(conversations, sampling)
        out = []
        for o in range(len(observations)):
            candidates = []
            for k in range(n):
                candidates.append({a: completions[(o * len(AGENTS) + j) * n + k].text for j, a in enumerate(AGENTS)})
            out.append(candidates)
        return out

    def act(self, observation: Mapping[str, Any]) -> dict[str, str]:
        return self.act_many([observation], n=1)[0][0]


def core_compressor(model: ChatModel, max_new_tokens: int = 900):
    """A Core compression hook backed by a chat model (used when Core overflows its limit)."""

    def compress(text: str, target: int) -> str:
        prompt = [{"role": "user", "content": prompts.render("compress_core", core=text, target=target)}]
        return model.generate([prompt], Sampling(temperature=0.0, max_new_tokens=max_new_tokens))[0].text.strip()

    return compress
