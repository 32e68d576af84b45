"""A format-only ``CandidateScorer``: validity and length, no questions answered.

Useful where the environment's QA reward is not wanted or not available: a format warm-up
stage, a smoke run of the trainer on a fresh machine (``scripts/gpu_check.py``), tests of the
trainer's mechanics. Every session is scored as an unrewarded one (``membuilder.reward``): r_task
is taken as 1, so r_a = 1[valid_a] * (1 - lambda * l_a), with the length rule of the reward
module (against the expert's outputs where they are given); nothing is retrieved, so every
weight is 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from membuilder import reward as R
from membuilder.agents.constructor import OBS_CORE, OBS_SESSION, OBS_TIME
from membuilder.memory.ops import AGENTS, parse, written_text


class FormatScorer:
    """Scores JSON validity and written length for fixed observations (key -> observation).

    ``experts`` (key -> agent -> raw output) gives the store agents' reference lengths.
    """

    reward_density = 1

    def __init__(self, observations: Mapping[str, Mapping[str, Any]], lam: float = R.LAMBDA,
                 experts: Mapping[str, Mapping[str, str]] | None = None):
        self.observations = dict(observations)
        self.lam = R.check_lambda(lam)
        self.experts = dict(experts or {})

    @classmethod
    def from_texts(cls, sessions: Mapping[str, str], time: str = "2024-01-01 19:00", lam: float = R.LAMBDA) -> FormatScorer:
        """Observations of sessions read with an empty memory."""
        return cls({k: {OBS_SESSION: text, OBS_TIME: time, OBS_CORE: "", "core_usage": 0.0,
                        **{a: [] for a in AGENTS[1:]}} for k, text in sessions.items()}, lam=lam)

    def session_keys(self) -> Sequence[str]:
        return list(self.observations)

    def observation(self, session_key: str) -> Mapping[str, Any]:
        return self.observations[session_key]

    def score(self, session_key: str, candidates: Sequence[Mapping[str, str]], *,
              task_rewarded: bool = True) -> list[R.CandidateReward]:
        expert = self.experts.get(session_key, {})
        tokens_expert = R.written_tokens({a: written_text(parse(a, expert[a]).ops) if a in expert else ""
                                          for a in AGENTS})
        out = []
        for cand in candidates:
            parsed = {a: parse(a, cand.get(a, "")) for a in AGENTS}
            out.append(R.candidate_reward(
                {a: parsed[a].valid for a in AGENTS},
                R.written_tokens({a: written_text(parsed[a].ops) if parsed[a].valid else "" for a in AGENTS}),
                tokens_expert, task_reward=None, lam=self.lam, info={"scorer": "format"}))
        return out
