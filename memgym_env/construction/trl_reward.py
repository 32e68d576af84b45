"""MemoryGym-v0 for a plain ``trl.GRPOTrainer``: a dataset of (session, agent) prompts and a reward
function. No trainer subclass, no extra dependency::

    from trl import GRPOConfig, GRPOTrainer
    from memgym_env.construction.config import ConstructionConfig
    from memgym_env.construction.trl_reward import MemoryReward, memory_dataset

    dataset, scorer = memory_dataset(ConstructionConfig(answer_mode="evidence"), users=[0, 1])
    trainer = GRPOTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct", reward_funcs=MemoryReward(scorer),
                          args=GRPOConfig(num_generations=4), train_dataset=dataset)

Each row is one agent's prompt for one session (columns ``prompt``, ``session_key``, ``agent``).
TRL samples G completions of a row; the reward function scores them together, as G candidate
actions written into the same memory snapshot, and gives each completion its agent's reward
r_a (``membuilder.reward``). A candidate needs all four agents' outputs: where the batch holds
the four agents of a session with G completions each, rollout k is the k-th completion of each
(MemBuilder's joint rollout); otherwise each agent is scored on its own, the other three writing
what the expert wrote for that session. ADRPO's attribution weights need the advantages, which a
reward function cannot reach: they are logged (``memgym/weight_<agent>``), and
``membuilder.training.adrpo.ADRPOTrainer`` applies them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from membuilder.agents.constructor import render_prompt
from membuilder.memory.ops import AGENTS
from membuilder.reward import CandidateScorer, task_rewarded_coin
from membuilder.training.prompts import fit_prompt, token_counter
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SessionScorer


def session_rows(scorer: CandidateScorer, keys: Sequence[str] | None = None, agents: Sequence[str] = AGENTS,
                 tokenizer=None, max_prompt_tokens: int | None = None) -> list[dict[str, Any]]:
    """One row per (session, agent): ``prompt`` (chat messages), ``session_key``, ``agent``.

    With ``tokenizer`` and ``max_prompt_tokens`` a long prompt is shortened in its memory view,
    never in its instructions (``membuilder.training.prompts.fit_prompt``).
    """
    unknown = [a for a in agents if a not in AGENTS]
    if unknown or not agents:
        raise ValueError(f"agents must be a non-empty subset of {list(AGENTS)}, got {list(agents)}")
    length = token_counter(tokenizer) if tokenizer is not None and max_prompt_tokens else None
    rows = []
    for key in scorer.session_keys() if keys is None else keys:
        obs = scorer.observation(key)
        for agent in agents:
            prompt = fit_prompt(agent, obs, length, max_prompt_tokens) if length else render_prompt(agent, obs)
            rows.append({"prompt": prompt, "session_key": key, "agent": agent})
    return rows


def memory_dataset(config: ConstructionConfig, users: Sequence[int] | None = None,
                   max_sessions_per_user: int | None = None, agents: Sequence[str] = AGENTS, tokenizer=None,
                   max_prompt_tokens: int | None = None):
    """``(datasets.Dataset, SessionScorer)`` for a world or conversation source named by ``config``.

    The scorer replays the expert's memory before each session, so rows can be sampled in any
    order; pass it to ``MemoryReward``.
    """
    from datasets import Dataset

    scorer = SessionScorer(config, users, max_sessions_per_user)
    return Dataset.from_list(session_rows(scorer, None, agents, tokenizer, max_prompt_tokens)), scorer


class MemoryReward:
    """A TRL reward function over any ``CandidateScorer`` (a ``SessionScorer`` here, a ``RemoteScorer``
    on scoring replicas) that also gives ``expert_action(session_key)``.

    Reward density 1/d (the scorer's) asks the session's questions on a seeded share of calls; on
    the others only validity and length count (see ``membuilder.reward``).
    """

    __name__ = "memorygym_reward"

    def __init__(self, scorer: CandidateScorer, seed: int = 0):
        if not callable(getattr(scorer, "expert_action", None)):
            raise TypeError(f"{type(scorer).__name__} has no expert_action(session_key): MemoryReward fills the agents "
                            "a row does not hold with the expert's outputs")
        self.scorer, self.seed = scorer, seed
        self.last: list[Any] = []  # the CandidateReward behind each completion of the last call

    def __call__(self, prompts, completions, session_key, agent, trainer_state=None,
                 log_metric: Callable[[str, float], None] | None = None, **_) -> list[float]:
        step = trainer_state.global_step if trainer_state is not None else 0
        where: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for i, (key, a) in enumerate(zip(session_key, agent, strict=True)):
            if a not in AGENTS:
                raise ValueError(f"row {i}: agent {a!r} is not one of {list(AGENTS)}")
            where[key][a].append(i)
        rewards: list[float] = [0.0] * len(completions)
        behind: list[Any] = [None] * len(completions)
        for key, by_agent in where.items():
            rewarded = self._task_rewarded(key, step)
            counts = {len(v) for v in by_agent.values()}
            if set(by_agent) == set(AGENTS) and len(counts) == 1:
                groups = [(list(AGENTS), by_agent)]  # a joint rollout: the k-th completion of every agent
            else:
                groups = [([a], {a: rows}) for a, rows in by_agent.items()]
            expert = self.scorer.expert_action(key)
            for agents, rows in groups:
                g = len(rows[agents[0]])
                candidates = [{**expert, **{a: _text(completions[rows[a][k]]) for a in agents}} for k in range(g)]
                scored = self.scorer.score(key, candidates, task_rewarded=rewarded)
                if len(scored) != g:
                    raise RuntimeError(f"session {key!r}: the scorer returned {len(scored)} rewards for {g} candidates")
                for k, reward in enumerate(scored):
                    for a in agents:
                        rewards[rows[a][k]] = float(reward.agent_rewards[a])
                        behind[rows[a][k]] = reward
        self.last = behind
        if log_metric is not None:
            for a in AGENTS:
                mine = [r.weights[a] for r, ag in zip(behind, agent, strict=True) if ag == a]
                if mine:
                    log_metric(f"memgym/weight_{a}", sum(mine) / len(mine))
            log_metric("memgym/task_reward", sum(r.task_reward for r in behind) / len(behind))
        return rewards

    def _task_rewarded(self, key: str, step: int) -> bool:
        return task_rewarded_coin(self.seed, step, key, getattr(self.scorer, "reward_density", 1))


def _text(completion: Any) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content", ""))
    return "".join(m.get("content", "") for m in completion if m.get("role") == "assistant")
