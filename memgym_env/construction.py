"""MemoryGym-v0: learning to build long-term memory, one dialogue session per step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from membuilder.agents.constructor import build_observation
from membuilder.memory import MEMORY_TYPES, EmbeddingCache, MemoryBank
from membuilder.ops import AGENTS
from membuilder.training.rewards import CandidateReward
from memgym_env import rewards as R
from memgym_env.episodes import Episode, conversation_episodes, generated_world_episodes, world_episodes
from memgym_env.session_scoring import ANSWER_MODES, ScoringModels, score_session
from memgym_env.spaces import FreeText

SNAPSHOT_MODES = ("expert", "on_policy")


@dataclass
class ConstructionConfig:
    """Every setting of MemoryGym-v0; ``configs/env/construction.yaml`` shows them all."""

    source: str = "world"  # "world" (generated or loaded AMemGym world) | "conversation" (a JSON file)
    world_path: str | None = None  # a data.json to load; None generates one
    world_config: str | None = None  # YAML for generation (None: the published base setting)
    world_overrides: dict[str, Any] = field(default_factory=lambda: {"num_users": 2, "num_periods": 2})
    conversation_path: str | None = None
    qa_path: str | None = None
    expert_path: str | None = None
    max_users: int | None = None
    questions_per_session: int = 5
    answer_mode: str = "choice"  # "choice" | "llm" | "evidence"
    answerer: str = "smollm2-135m"
    judge: str | None = None  # None: the answerer judges
    embedder: str = "minilm"
    snapshot: str = "expert"  # "expert" | "on_policy"
    lam: float = R.LAMBDA
    alpha: float = 4.0
    reward_density: int = 1  # d: a session gets the task reward with probability 1/d
    answer_k: int = 10
    view_k: int = 20

    def __post_init__(self) -> None:
        if self.answer_mode not in ANSWER_MODES:
            raise ValueError(f"answer_mode {self.answer_mode!r}; expected one of {ANSWER_MODES}")
        if self.snapshot not in SNAPSHOT_MODES:
            raise ValueError(f"snapshot {self.snapshot!r}; expected one of {SNAPSHOT_MODES}")
        if self.source not in ("world", "conversation"):
            raise ValueError(f"source {self.source!r}; expected 'world' or 'conversation'")
        if self.reward_density < 1:
            raise ValueError("reward_density must be >= 1")

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> ConstructionConfig:
        import yaml

        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{path}: unknown fields {unknown}; known: {sorted(known)}")
        return cls(**{**data, **overrides})


class MemoryGymEnv(gym.Env):
    """
    ## Description

    An assistant's long-term memory is built one conversation session at a time. At each step the
    policy (a language model playing four memory agents, as in MemBuilder) reads one session and
    writes JSON operations for four memories: **Core** (a 5,000-character block always in
    context), **Episodic** (dated events), **Semantic** (facts) and **Procedural** (routines).
    The reward says how well the resulting memory answers questions about that session.

    Episodes are the users of a structured world (generated offline, seeded) or the
    conversations of a JSON file; each session carries about 5 questions (50% single-session,
    30% multi-session, 20% temporal).

    ## Action Space

    A `Dict` of four `FreeText` strings, the agents' raw outputs: `core`
    (`{"operation": "APPEND"|"REPLACE"|"REWRITE", ...}`), `episodic`, `semantic`, `procedural`
    (`{"operations": [{"action": ..., ...}]}`). Any string is a legal action: output that does not
    parse is an invalid agent, which changes nothing and earns that agent 0.

    ## Observation Space

    | key | type | meaning |
    |---|---|---|
    | `session` | text | the session's messages, one per line, `speaker: text` |
    | `session_time` | text | the session's date and time |
    | `session_index` / `num_sessions` | int | position in the episode |
    | `core` / `core_usage` | text / float | the Core block and its fill in percent |
    | `episodic`, `semantic`, `procedural` | tuple of text | that agent's top-20 own-type entries for this session |

    `membuilder.agents.constructor.render_prompts(obs)` turns an observation into the four prompts.

    ## Rewards

    For each agent a: `r_a = 1[valid_a] * r_task * (1 - lambda * l_a)`, lambda = 0.8, where
    `r_task` is the fraction of the session's questions answered correctly from Core + the top-10
    retrieved entries, and `l_a` penalises writing much more or less than the expert (Core: 0 up
    to 150 tokens, 1 from 400). The step reward is the mean of the four. `info["agent_rewards"]`,
    `info["weights"]` (ADRPO: the memory type most retrieved gets `alpha`), validity, penalties
    and every question with the answer given are in `info`. With `reward_density` d > 1, a session
    gets the task reward with probability 1/d (seeded); otherwise `r_task` is taken as 1 and only
    validity and length count.

    ## Starting State

    An empty memory and the first session of an episode chosen by the seed (or
    `options={"episode": i}`).

    ## Episode End

    1. Termination: the last session of the episode has been written.
    2. Truncation: none (the `TimeLimit` wrapper is not set).

    ## Arguments

    `gym.make("MemoryGym-v0", config=ConstructionConfig(...))` or keyword overrides of its fields:

    | argument | default | meaning |
    |---|---|---|
    | `source` | `"world"` | `"world"` or `"conversation"` |
    | `world_path` / `world_config` / `world_overrides` | `None` / base / 2 users, 2 periods | which world |
    | `conversation_path`, `qa_path`, `expert_path` | `None` | conversation source files |
    | `answer_mode` | `"choice"` | `"choice"` (log-prob multiple choice), `"llm"` (answer + judge), `"evidence"` (no model) |
    | `answerer`, `judge`, `embedder` | `smollm2-135m`, answerer, `minilm` | model specs |
    | `snapshot` | `"expert"` | restore the expert's memory before each session, or `"on_policy"` |
    | `lam`, `alpha`, `reward_density` | 0.8, 4, 1 | reward settings |
    | `answer_k`, `view_k`, `questions_per_session` | 10, 20, 5 | retrieval and QA sizes |

    ```python
    >>> import gymnasium as gym, memgym_env
    >>> env = gym.make("MemoryGym-v0", answer_mode="evidence")          # doctest: +SKIP
    >>> obs, info = env.reset(seed=0)                                   # doctest: +SKIP
    >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.expert_action())  # doctest: +SKIP
    ```

    `env.unwrapped.score_candidates([a1, ..., aG])` scores G candidate actions for the current
    session from one shared snapshot without advancing.

    ## Version History

    * v0: first release.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, config: ConstructionConfig | Mapping[str, Any] | None = None, render_mode: str | None = None,
                 **overrides: Any):
        if isinstance(config, ConstructionConfig):
            config = ConstructionConfig(**{**asdict(config), **overrides})
        else:
            config = ConstructionConfig(**{**dict(config or {}), **overrides})
        self.config = config
        self.render_mode = render_mode
        text = FreeText()
        self.action_space = spaces.Dict({a: FreeText() for a in AGENTS})
        self.observation_space = spaces.Dict({
            "session": text,
            "session_time": text,
            "session_index": spaces.Discrete(100_000),
            "num_sessions": spaces.Discrete(100_000),
            "core": text,
            "core_usage": spaces.Box(0.0, 100.0, shape=(), dtype=np.float32),
            **{t: spaces.Sequence(FreeText(), stack=False) for t in MEMORY_TYPES},
        })
        self._episodes: list[Episode] | None = None
        self._models: ScoringModels | None = None
        self._cache: EmbeddingCache | None = None
        self._episode: Episode | None = None
        self._bank: MemoryBank | None = None
        self._expert_bank: MemoryBank | None = None
        self._index = 0
        self._rewarded: list[bool] = []

    # ---- lazy set-up: nothing heavy happens in __init__ -------------------------------------
    @property
    def episodes(self) -> list[Episode]:
        if self._episodes is None:
            c = self.config
            if c.source == "conversation":
                if not c.conversation_path:
                    raise ValueError("source 'conversation' needs conversation_path")
                self._episodes = conversation_episodes(c.conversation_path, c.qa_path, c.expert_path)
            elif c.world_path:
                from memgym_env.world import read_world

                self._episodes = world_episodes(read_world(c.world_path), c.questions_per_session, 0, c.max_users)
            else:
                self._episodes = generated_world_episodes(c.world_config, c.world_overrides, c.questions_per_session,
                                                          0, c.max_users)
            if c.snapshot == "expert" and any(e.expert_outputs is None for e in self._episodes):
                raise ValueError("snapshot 'expert' needs expert outputs for every episode (expert_path), "
                                 "or use snapshot='on_policy'")
        return self._episodes

    def _ensure_models(self) -> None:
        if self._cache is None:
            from membuilder.llm.embedders import load_embedder

            self._cache = EmbeddingCache(load_embedder(self.config.embedder))
        if self._models is None:
            models = ScoringModels()
            if self.config.answer_mode != "evidence":
                from membuilder.llm import load_chat_model

                models.answerer = load_chat_model(self.config.answerer)
                models.judge = load_chat_model(self.config.judge) if self.config.judge else models.answerer
                models.count_tokens = models.answerer.count_tokens
            self._models = models

    # ---- the Gymnasium API ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._ensure_models()
        episodes = self.episodes
        choice = (options or {}).get("episode")
        i = int(self.np_random.integers(len(episodes))) if choice is None else int(choice)
        if not 0 <= i < len(episodes):
            raise ValueError(f"options['episode']={i} out of range: {len(episodes)} episodes")
        self._episode = episodes[i]
        self._episode_index = i
        self._bank = MemoryBank(cache=self._cache)
        self._expert_bank = MemoryBank(cache=self._cache) if self._episode.expert_outputs else None
        self._index = 0
        n = len(self._episode.conversation.sessions)
        self._rewarded = [bool(self.np_random.random() < 1.0 / self.config.reward_density) for _ in range(n)]
        return self._observation(), {"episode": i, "conversation": self._episode.conversation.id, "num_sessions": n}

    def step(self, action: Mapping[str, str]):
        if self._episode is None:
            raise RuntimeError("call reset() before step()")
        if self._index >= len(self._episode.conversation.sessions):
            raise RuntimeError("the episode has ended; call reset()")
        scored = self._score([action])[0]
        self._advance(scored.bank)
        terminated = self._index >= len(self._episode.conversation.sessions)
        info = self._info(scored.reward)
        return self._observation(), scored.reward.reward, terminated, False, info

    def score_candidates(self, candidates: Sequence[Mapping[str, str]], alpha: float | None = None) -> list[CandidateReward]:
        """Rewards of G candidate actions for the current session, all from the same snapshot.

        The environment does not move; call ``step`` with the chosen action to advance.
        """
        return [s.reward for s in self._score(candidates, alpha)]

    def expert_action(self) -> dict[str, str]:
        """The expert's outputs for the current session (the oracle for worlds)."""
        if self._episode is None or self._episode.expert_outputs is None:
            raise RuntimeError("this episode has no expert outputs")
        return dict(self._episode.expert_outputs[self._index])

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self._bank is None:
            return None
        return f"session {self._index}/{len(self._episode.conversation.sessions)} | core {self._bank.core.usage:.0f}% | {self._bank.counts()}"

    # ---- internals --------------------------------------------------------------------------
    @property
    def snapshot(self) -> MemoryBank:
        """The memory the current session is written into."""
        return self._bank

    def _score(self, candidates, alpha=None):
        conv = self._episode.conversation
        session = conv.sessions[self._index]
        expert = self._episode.expert_outputs[self._index] if self._episode.expert_outputs else None
        return score_session(
            self._bank, session, conv.qa_for_session(session.id), candidates,
            mode=self.config.answer_mode, models=self._models, expert_output=expert,
            task_rewarded=self._rewarded[self._index], alpha=self.config.alpha if alpha is None else alpha,
            lam=self.config.lam, answer_k=self.config.answer_k,
        )

    def _advance(self, policy_bank: MemoryBank) -> None:
        session = self._episode.conversation.sessions[self._index]
        if self._expert_bank is not None:
            for agent, text in self._episode.expert_outputs[self._index].items():
                self._expert_bank.apply(agent, text, time=session.time, session=session.id)
        if self.config.snapshot == "expert":
            self._bank = self._expert_bank.fork()
        else:
            self._bank = policy_bank
        self._index += 1

    def _observation(self) -> dict[str, Any]:
        conv = self._episode.conversation
        n = len(conv.sessions)
        session = conv.sessions[self._index] if self._index < n else None
        obs = build_observation(self._bank, session.render() if session else "", session.time if session else "",
                                self.config.view_k)
        obs["session_index"], obs["num_sessions"] = self._index, n
        obs["core_usage"] = np.array(obs["core_usage"], dtype=np.float32)
        return obs

    def _info(self, reward: CandidateReward) -> dict[str, Any]:
        usage = {}
        if self._models and self._models.answerer is not None:
            usage["answerer"] = self._models.answerer.usage.to_dict()
        return {
            "agent_rewards": reward.agent_rewards,
            "weights": reward.weights,
            "task_reward": reward.task_reward,
            "task_rewarded": reward.task_rewarded,
            "valid": reward.valid,
            "length_penalty": reward.length_penalty,
            "session_index": self._index - 1,
            "model_usage": usage,
            **reward.info,
        }



def make_vector_env(num_envs: int = 1, **kwargs: Any) -> gym.vector.SyncVectorEnv:
    """``gym.make_vec("MemoryGym-v0", num_envs, vectorization_mode="vector_entry_point")``.

    The sub-environments share one embedder, one embedding cache and one answer model, so N
    environments cost one model load instead of N.
    """
    first = MemoryGymEnv(**kwargs)
    first._ensure_models()
    envs = [first]
    for _ in range(num_envs - 1):
        env = MemoryGymEnv(**kwargs)
        env._cache, env._models, env._episodes = first._cache, first._models, first.episodes
        envs.append(env)
    return gym.vector.SyncVectorEnv([lambda e=e: e for e in envs])


class SessionScorer:
    """Every session of MemoryGym-v0's episodes as a ``CandidateScorer`` for the trainer.

    Each session's snapshot is the expert's memory just before it (MemBuilder's training setup),
    kept as an O(1) fork, so any session can be scored in any order.
    """

    def __init__(self, env: MemoryGymEnv, users: Sequence[int] | None = None, max_sessions_per_user: int | None = None):
        if env.config.snapshot != "expert":
            raise ValueError("the trainer's scorer replays sessions out of order: it needs snapshot 'expert'")
        env._ensure_models()
        self.env = env
        self._sessions: dict[str, tuple[Episode, int, MemoryBank]] = {}
        picked = range(len(env.episodes)) if users is None else users
        for u in picked:
            if not 0 <= u < len(env.episodes):
                raise ValueError(f"user index {u} out of range: {len(env.episodes)} episodes")
            ep = env.episodes[u]
            bank = MemoryBank(cache=env._cache)
            for j, session in enumerate(ep.conversation.sessions[:max_sessions_per_user]):
                self._sessions[f"{ep.conversation.id}/{session.id}"] = (ep, j, bank.fork())
                for agent, text in ep.expert_outputs[j].items():
                    bank.apply(agent, text, time=session.time, session=session.id)

    def session_keys(self) -> list[str]:
        return list(self._sessions)

    def observation(self, session_key: str) -> dict[str, Any]:
        ep, j, bank = self._lookup(session_key)
        s = ep.conversation.sessions[j]
        return build_observation(bank, s.render(), s.time, self.env.config.view_k)

    def score(self, session_key: str, candidates: Sequence[Mapping[str, str]], alpha: float = 4.0) -> list[CandidateReward]:
        ep, j, bank = self._lookup(session_key)
        s = ep.conversation.sessions[j]
        c = self.env.config
        scored = score_session(bank, s, ep.conversation.qa_for_session(s.id), candidates, mode=c.answer_mode,
                               models=self.env._models, expert_output=ep.expert_outputs[j], alpha=alpha,
                               lam=c.lam, answer_k=c.answer_k)
        return [x.reward for x in scored]

    def _lookup(self, key: str):
        if key not in self._sessions:
            raise KeyError(f"no session {key!r} in this scorer")
        return self._sessions[key]


def make_scorer(options: Mapping[str, Any]) -> SessionScorer:
    """Build the trainer's scorer from ``train/adrpo.py``'s options (world, models, sizes)."""
    o = dict(options)
    overrides = {"num_users": o.pop("num_users", 2)}
    if "world_seed" in o:
        overrides["seed"] = o.pop("world_seed")
    cfg = ConstructionConfig(
        world_path=o.pop("world_path", None), world_config=o.pop("world_config", None), world_overrides=overrides,
        snapshot=o.pop("snapshot", "expert"), answer_mode=o.pop("answer_mode", "choice"),
        answerer=o.pop("answer_model", "smollm2-135m"), judge=o.pop("judge_model", None),
        embedder=o.pop("embedder", "minilm"), view_k=o.pop("view_k", 20),
        lam=o.pop("reward_lambda", None) or R.LAMBDA,
    )
    users, max_sessions = o.pop("users", None), o.pop("max_sessions_per_user", None)
    if o:
        raise ValueError(f"make_scorer: unknown options {sorted(o)}")
    return SessionScorer(MemoryGymEnv(cfg), users, max_sessions)
