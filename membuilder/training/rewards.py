"""The contract between the trainer and whatever scores memory writes.

Training code lives in ``membuilder`` and never imports the environment: it receives a
``CandidateScorer`` (in practice ``MemoryGym-v0``'s session scorer) and asks it to score the G
rollouts of a session. Rollout k is the k-th completion of each of the four agents, scored
together from one shared memory snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class CandidateReward:
    """The reward of one rollout (four agent outputs) of one session."""

    agent_rewards: dict[str, float]  # r_a = 1[valid_a] * r_task * (1 - lambda * l_a), per agent
    weights: dict[str, float]  # ADRPO attribution weight w_a per agent (alpha for the dominant type, else 1)
    task_reward: float  # fraction of the session's questions answered correctly
    valid: dict[str, bool] = field(default_factory=dict)
    length_penalty: dict[str, float] = field(default_factory=dict)
    task_rewarded: bool = True  # False when reward density 1/d skipped the task reward for this session
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def reward(self) -> float:
        return sum(self.agent_rewards.values()) / max(1, len(self.agent_rewards))


class CandidateScorer(Protocol):
    def session_keys(self) -> Sequence[str]:
        """Every session that can be scored, as stable string keys."""
        ...

    def observation(self, session_key: str) -> Mapping[str, Any]:
        """The construction observation of a session (what the policy's prompts render)."""
        ...

    def score(self, session_key: str, candidates: Sequence[Mapping[str, str]], alpha: float = 4.0) -> list[CandidateReward]:
        """Score G candidate actions (agent -> raw output) of one session from one shared snapshot."""
        ...
