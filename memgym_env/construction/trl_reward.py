"""MemoryGym-v0 for a plain ``trl.GRPOTrainer``: a dataset of (session, agent) prompts, scored by the
reward function ADRPO trains with. No trainer subclass, no extra dependency::

    from trl import GRPOConfig, GRPOTrainer
    from membuilder.training.trl_reward import SessionReward
    from memgym_env.construction.config import ConstructionConfig
    from memgym_env.construction.trl_reward import memory_dataset

    dataset, scorer = memory_dataset(ConstructionConfig(answer_mode="evidence"), users=[0, 1])
    trainer = GRPOTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct", reward_funcs=SessionReward(scorer),
                          args=GRPOConfig(num_generations=4), train_dataset=dataset)

Each row is one agent's prompt for one session (``membuilder.training.prompts.rl_rows``). TRL
samples G completions of a row; ``SessionReward`` scores them together, as G candidate actions
written into the same memory snapshot, and gives each completion its agent's reward r_a
(``membuilder.reward``). Where the batch holds the four agents of a session with G completions
each, rollout k is the k-th completion of each (MemBuilder's joint rollout); otherwise each agent
is scored on its own, the other three writing what the expert wrote for that session. ADRPO's
attribution weights need the advantages, which a reward function cannot reach: they are logged
(``adrpo/weight_<agent>``), and ``membuilder.training.adrpo.ADRPOTrainer`` applies them.

This module holds what is MemoryGym-v0's: the scorer of a ``ConstructionConfig`` and the rows of
that scorer's sessions (or of a ``RemoteScorer``'s, on ``memgym serve-env`` replicas).
"""

from __future__ import annotations

from collections.abc import Sequence

from membuilder.memory.ops import AGENTS
from membuilder.reward import CandidateScorer
from membuilder.training.prompts import rl_rows, token_counter
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SessionScorer


def scorer_dataset(scorer: CandidateScorer, agents: Sequence[str] = AGENTS, tokenizer=None,
                   max_prompt_tokens: int | None = None):
    """``datasets.Dataset`` of one row per (session, agent) over every session ``scorer`` serves.

    With ``tokenizer`` and ``max_prompt_tokens`` a long prompt is shortened in its memory view,
    never in its instructions.
    """
    from datasets import Dataset

    length = token_counter(tokenizer) if tokenizer is not None else None
    return Dataset.from_list(rl_rows(scorer.session_keys(), scorer.observation, length, max_prompt_tokens, agents))


def memory_dataset(config: ConstructionConfig, users: Sequence[int] | None = None,
                   max_sessions_per_user: int | None = None, agents: Sequence[str] = AGENTS, tokenizer=None,
                   max_prompt_tokens: int | None = None, pick: str = "first"):
    """``(datasets.Dataset, SessionScorer)`` for a world or conversation source named by ``config``.

    The scorer replays the expert's memory before each session, so rows can be sampled in any
    order; pass it to ``SessionReward``. ``max_sessions_per_user`` sessions of each user are kept,
    the first ones or, with ``pick="every_period"``, spread over every period (``SessionScorer``).
    """
    scorer = SessionScorer(config, users, max_sessions_per_user, pick=pick)
    return scorer_dataset(scorer, agents, tokenizer, max_prompt_tokens), scorer
