"""A format-only ``CandidateScorer``: validity and length, no questions answered.

Useful where the environment's QA reward is not wanted or not available: a format warm-up
stage, a smoke run of the trainer on a fresh machine (``scripts/gpu_check.py``), tests of the
trainer's mechanics. Every valid output counts as if all questions were answered (task reward
1), so r_a = 1[valid_a] * (1 - lambda * l_a), with the Core length rule of protocols §2 (0 up to
150 tokens of written content, 1 from 400, linear between; tokens estimated as characters / 4)
applied to every agent. Nothing is retrieved, so there is no attribution: every weight is 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from membuilder.agents.constructor import OBS_CORE, OBS_SESSION, OBS_TIME
from membuilder.ops import AGENTS, parse, written_text
from membuilder.training.rewards import CandidateReward


def length_penalty(text: str, low: int = 150, high: int = 400) -> float:
    tokens = len(text) / 4
    return min(1.0, max(0.0, (tokens - low) / (high - low)))


class FormatScorer:
    """Scores JSON validity and length of written text for fixed observations (key -> observation)."""

    def __init__(self, observations: Mapping[str, Mapping[str, Any]], reward_lambda: float = 0.8):
        self.observations = dict(observations)
        self.reward_lambda = reward_lambda

    @classmethod
    def from_texts(cls, sessions: Mapping[str, str], time: str = "2024-01-01 19:00") -> FormatScorer:
        """Observations of sessions read with an empty memory."""
        return cls({k: {OBS_SESSION: text, OBS_TIME: time, OBS_CORE: "", "core_usage": 0.0,
                        **{a: [] for a in AGENTS[1:]}} for k, text in sessions.items()})

    def session_keys(self) -> Sequence[str]:
        return list(self.observations)

    def observation(self, session_key: str) -> Mapping[str, Any]:
        return self.observations[session_key]

    def score(self, session_key: str, candidates: Sequence[Mapping[str, str]], alpha: float = 4.0) -> list[CandidateReward]:
        out = []
        for cand in candidates:
            parsed = {a: parse(a, cand.get(a, "")) for a in AGENTS}
            valid = {a: parsed[a].valid for a in AGENTS}
            penalty = {a: length_penalty(written_text(parsed[a].ops)) if valid[a] else 0.0 for a in AGENTS}
            rewards = {a: float(valid[a]) * (1.0 - self.reward_lambda * penalty[a]) for a in AGENTS}
            out.append(CandidateReward(agent_rewards=rewards, weights=dict.fromkeys(AGENTS, 1.0), task_reward=1.0,
                                       valid=valid, length_penalty=penalty, info={"scorer": "format"}))
        return out
