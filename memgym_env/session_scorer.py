"""MemoryGym-v0's sessions as a ``CandidateScorer`` for the trainer (and for policy evaluation).

Each session's snapshot is the expert's memory just before it (MemBuilder's training setup),
kept as an O(1) fork, so any session can be scored in any order. It is built from the same
public functions as the environment (``load_episodes``, ``load_scoring_models``,
``expert_snapshots``) and scores with the same stages (``score_session``), so a trainer's reward
and an env step's reward for the same writes are the same number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from membuilder.agents.constructor import build_observation
from membuilder.memory import MemoryBank
from membuilder.reward import CandidateReward
from memgym_env.construction_config import ConstructionConfig
from memgym_env.episodes import Episode, expert_snapshots, load_episodes
from memgym_env.session_scoring import load_scoring_models, score_session


class SessionScorer:
    """Every (chosen) session of a ``ConstructionConfig``'s episodes, scorable by key ``"<conversation>/<session>"``.

    ``users`` picks episodes by index (None: all); ``max_sessions_per_user`` keeps the first N
    sessions of each. ``reward_density``, ``lam`` and ``alpha`` are the config's.
    """

    def __init__(self, config: ConstructionConfig, users: Sequence[int] | None = None,
                 max_sessions_per_user: int | None = None):
        if config.snapshot != "expert":
            raise ValueError("the trainer's scorer replays sessions out of order, so it needs snapshot 'expert' "
                             "(the memory before a session is the expert's); on_policy is for env.step")
        self.config = config
        self.reward_density = config.reward_density
        episodes = load_episodes(config)
        self.cache, self.models = load_scoring_models(config)
        self._sessions: dict[str, tuple[Episode, int, MemoryBank]] = {}
        for u in range(len(episodes)) if users is None else users:
            if not 0 <= u < len(episodes):
                raise ValueError(f"user index {u} out of range: the world has {len(episodes)} users "
                                 f"(env config world_overrides={config.world_overrides}, world_path={config.world_path})")
            ep = episodes[u]
            for j, bank in enumerate(expert_snapshots(ep, self.cache, max_sessions_per_user)[:-1]):
                self._sessions[f"{ep.conversation.id}/{ep.conversation.sessions[j].id}"] = (ep, j, bank)

    def session_keys(self) -> list[str]:
        return list(self._sessions)

    def __contains__(self, session_key: object) -> bool:
        return session_key in self._sessions

    def observation(self, session_key: str) -> dict[str, Any]:
        ep, j, bank = self._lookup(session_key)
        s = ep.conversation.sessions[j]
        return build_observation(bank, s.render(), s.time, self.config.view_k)

    def expert_action(self, session_key: str) -> dict[str, str]:
        ep, j, _ = self._lookup(session_key)
        return dict(ep.expert_outputs[j])

    def score(self, session_key: str, candidates: Sequence[Mapping[str, str]], *,
              task_rewarded: bool = True) -> list[CandidateReward]:
        ep, j, bank = self._lookup(session_key)
        s, c = ep.conversation.sessions[j], self.config
        scored = score_session(bank, s, ep.conversation.qa_for_session(s.id), candidates, mode=c.answer_mode,
                               models=self.models, expert_output=ep.expert_outputs[j], task_rewarded=task_rewarded,
                               alpha=c.alpha, lam=c.lam, answer_k=c.answer_k)
        return [x.reward for x in scored]

    def _lookup(self, key: str):
        if key not in self._sessions:
            raise KeyError(f"no session {key!r} in this scorer")
        return self._sessions[key]
