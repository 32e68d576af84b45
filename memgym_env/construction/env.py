"""MemoryGym-v0: learning to build long-term memory, one dialogue session per step."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from membuilder.agents.constructor import build_observation
from membuilder.memory import MEMORY_TYPES, EmbeddingCache, MemoryBank
from membuilder.memory.ops import AGENTS
from membuilder.reward import CandidateReward
from memgym_env.construction.config import SNAPSHOT_MODES, ConstructionConfig
from memgym_env.construction.episodes import Episode, expert_snapshots, load_episodes
from memgym_env.construction.scoring import (
    ScoringModels,
    answer_questions,
    apply_candidates,
    load_scoring_models,
    retrieve_for_questions,
    reward_candidates,
    score_session,
    token_counter,
)
from memgym_env.spaces import FreeText

__all__ = ["SNAPSHOT_MODES", "ConstructionConfig", "MemoryGymEnv", "make_vector_env"]


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

    For each agent a: `r_a = 1[valid_a] * r_task * (1 - lambda * l_a)`, lambda = `lam` (0.8; 0
    means no length penalty), where `r_task` is the fraction of the session's questions answered
    correctly from Core + the top-10 retrieved entries, and `l_a` penalises writing much more or
    less than the expert (Core: 0 up to 150 tokens, 1 from 400; the stores: outside 0.5-1.3x the
    expert's tokens and more than 200 tokens away). The step reward is the mean of the four.
    `info["agent_rewards"]`, `info["weights"]` and `info["dominant"]` (ADRPO: the memory type
    most retrieved gets `alpha`), validity, penalties and every question with the answer given
    are in `info`. With `reward_density` d > 1, a session gets the task reward with probability
    1/d (seeded); otherwise no question is asked, `r_task` is taken as 1, only validity and
    length count, and every weight is 1. The formula has one home: `membuilder.reward`.

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
    | `answer_mode` | `"choice"` | `"choice"` (log-prob multiple choice), `"llm"` (answer + judge), `"evidence"` (no model), `"stale"` (evidence, and no replaced value stated as current) |
    | `answer_view`, `attribution` | `None` (live in stale mode, else all), `"retrieval"` | what the answerer reads; ADRPO's attribution rule (`"evidence"` follows the memory that held the answer) |
    | `write_view` | `"all"` | what each writer's memory view is drawn from (`"live"`: no entry an UPDATE or MERGE replaced) |
    | `quote_miss` | `"add"` | an edit quoting memory that is not there: `"add"` scores the memory as it stands (published); `"zero"` also sets that agent's r_a to 0 (`info["misquoted"]`) |
    | `answerer`, `judge`, `embedder` | `smollm2-135m`, answerer, `minilm` | model specs |
    | `judge_prompt` | `"locomo"` | the judge prompt that grades `llm` answers (`locomo`: Mem0's generous J as published, `locomo-strict`, `longmemeval`, `perltqa`) |
    | `answer_max_tokens`, `judge_max_tokens` | 48, 24 | token limits; a reply cut at its limit is counted in `info` |
    | `chat_template_kwargs` | `{"enable_thinking": false}` | rendered into every answerer/judge prompt, local or served (Qwen3: answer, do not think) |
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
    session from one shared snapshot without advancing; `env.unwrapped.model_usage()` gives the
    answer model's running usage (kept out of `info`, which must be the same for the same seed).

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
        self._expert: list[MemoryBank] | None = None  # expert snapshots, one per session + the final memory
        self._index = 0
        self._rewarded: list[bool] = []
        self._warned_cut = False

    # ---- lazy set-up: nothing heavy happens in __init__ -------------------------------------
    @property
    def episodes(self) -> list[Episode]:
        if self._episodes is None:
            episodes = load_episodes(self.config)
            if self.config.snapshot == "expert" and any(e.expert_outputs is None for e in episodes):
                raise ValueError("snapshot 'expert' needs expert outputs for every episode (expert_path), "
                                 "or use snapshot='on_policy'")
            self._episodes = episodes
        return self._episodes

    def share_models_with(self, other: MemoryGymEnv) -> None:
        """Use ``other``'s embedder cache, scoring models and episodes (one load for N envs)."""
        other.load_models()
        self.use_scoring_models(other._cache, other._models)
        self._episodes = other.episodes

    def use_scoring_models(self, cache: EmbeddingCache, models: ScoringModels) -> None:
        """Score with an embedding cache and models loaded elsewhere (a server's, shared by its sessions)."""
        self._cache, self._models = cache, models

    def load_models(self) -> None:
        if self._models is None:
            self._cache, self._models = load_scoring_models(self.config)

    def model_usage(self) -> dict[str, Any]:
        """Running usage of the answer model (calls, tokens, seconds); empty in evidence mode."""
        answerer = self._models.answerer if self._models else None
        return {"answerer": answerer.usage.to_dict()} if answerer is not None else {}

    # ---- the Gymnasium API ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.load_models()
        episodes = self.episodes
        choice = (options or {}).get("episode")
        i = int(self.np_random.integers(len(episodes))) if choice is None else int(choice)
        if not 0 <= i < len(episodes):
            raise ValueError(f"options['episode']={i} out of range: {len(episodes)} episodes")
        self._episode = episodes[i]
        self._expert = expert_snapshots(self._episode, self._cache) if self.config.snapshot == "expert" else None
        self._bank = self._expert[0] if self._expert else MemoryBank(cache=self._cache)
        self._index = 0
        n = len(self._episode.conversation.sessions)
        self._rewarded = [bool(self.np_random.random() < 1.0 / self.config.reward_density) for _ in range(n)]
        return self._observation(), {"episode": i, "conversation": self._episode.conversation.id, "num_sessions": n}

    def step(self, action: Mapping[str, str]):
        if self._episode is None:
            raise RuntimeError("call reset() before step()")
        if self._index >= len(self._episode.conversation.sessions):
            raise RuntimeError("the episode has ended; call reset()")
        c, session = self.config, self._session()
        questions = self._episode.conversation.qa_for_session(session.id)
        # 1. apply: the policy's four outputs go into a fork of the current memory
        (bank,), (applied,) = apply_candidates(self._bank, session, [action])
        # 2. answer: the session's questions, from Core + top-k (skipped on an unrewarded session)
        answers = hits = None
        if self._rewarded[self._index] and questions:
            hits = retrieve_for_questions([bank], questions, c.answer_k, live_only=c.live_view)
            answers = answer_questions([bank], hits, questions, c.answer_mode, self._models)
        # 3. reward: validity, task reward, length penalty, attribution (membuilder.reward)
        (reward,) = reward_candidates([applied], answers, hits, self._expert_output(),
                                      count_tokens=token_counter(self._models), lam=c.lam, alpha=c.alpha,
                                      attribution=c.attribution, quote_miss=c.quote_miss)
        self._warn_if_cut(reward)
        # 4. advance: the next session starts from the expert's memory or from this one
        self._index += 1
        self._bank = self._expert[self._index] if self._expert else bank
        terminated = self._index >= len(self._episode.conversation.sessions)
        return self._observation(), reward.reward, terminated, False, self._info(reward)

    def score_candidates(self, candidates: Sequence[Mapping[str, str]], alpha: float | None = None) -> list[CandidateReward]:
        """Rewards of G candidate actions for the current session, all from the same snapshot.

        The environment does not move; call ``step`` with the chosen action to advance.
        """
        session = self._session()
        scored = score_session(
            self._bank, session, self._episode.conversation.qa_for_session(session.id), candidates,
            mode=self.config.answer_mode, models=self._models, expert_output=self._expert_output(),
            task_rewarded=self._rewarded[self._index], alpha=self.config.alpha if alpha is None else alpha,
            lam=self.config.lam, answer_k=self.config.answer_k, live_view=self.config.live_view,
            attribution=self.config.attribution, quote_miss=self.config.quote_miss)
        for s in scored:
            self._warn_if_cut(s.reward)
        return [s.reward for s in scored]

    def expert_action(self) -> dict[str, str]:
        """The expert's outputs for the current session (the oracle for worlds)."""
        if self._episode is None or self._episode.expert_outputs is None:
            raise RuntimeError("this episode has no expert outputs")
        return dict(self._episode.expert_outputs[self._index])

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self._bank is None:
            return None
        return f"session {self._index}/{len(self._episode.conversation.sessions)} | core {self._bank.core.usage:.0f}% | {self._bank.counts()}"

    @property
    def snapshot(self) -> MemoryBank:
        """The memory the current session is written into."""
        return self._bank

    # ---- internals --------------------------------------------------------------------------
    def _session(self):
        if self._episode is None:
            raise RuntimeError("call reset() first")
        return self._episode.conversation.sessions[self._index]

    def _expert_output(self) -> Mapping[str, str] | None:
        return self._episode.expert_outputs[self._index] if self._episode.expert_outputs else None

    def _warn_if_cut(self, reward: CandidateReward) -> None:
        cut = reward.info.get("answers_cut", 0) + reward.info.get("verdicts_cut", 0)
        if cut and not self._warned_cut:
            self._warned_cut = True
            warnings.warn(f"{cut} answers or verdicts stopped at their token limit (answer_max_tokens="
                          f"{self.config.answer_max_tokens}, judge_max_tokens={self.config.judge_max_tokens}); "
                          "a thinking model needs chat_template_kwargs {'enable_thinking': False} or a higher "
                          "limit. Counted in info['answers_cut'] / info['verdicts_cut'].", stacklevel=3)

    def _observation(self) -> dict[str, Any]:
        conv = self._episode.conversation
        n = len(conv.sessions)
        session = conv.sessions[self._index] if self._index < n else None
        obs = build_observation(self._bank, session.render() if session else "", session.time if session else "",
                                self.config.view_k, self.config.write_live)
        obs["session_index"], obs["num_sessions"] = self._index, n
        obs["core_usage"] = np.array(obs["core_usage"], dtype=np.float32)
        return obs

    def _info(self, reward: CandidateReward) -> dict[str, Any]:
        return {
            "agent_rewards": reward.agent_rewards,
            "weights": reward.weights,
            "dominant": reward.dominant,
            "dominant_by_rule": reward.dominant_by_rule,
            "task_reward": reward.task_reward,
            "task_rewarded": reward.task_rewarded,
            "valid": reward.valid,
            "misquoted": reward.misquoted,
            "length_penalty": reward.length_penalty,
            "session_index": self._index - 1,
            **reward.info,
        }


def make_vector_env(num_envs: int = 1, **kwargs: Any) -> gym.vector.SyncVectorEnv:
    """``gym.make_vec("MemoryGym-v0", num_envs, vectorization_mode="vector_entry_point")``.

    The sub-environments share one embedder, one embedding cache and one answer model, so N
    environments cost one model load instead of N.
    """
    first = MemoryGymEnv(**kwargs)
    envs = [first]
    for _ in range(num_envs - 1):
        env = MemoryGymEnv(**kwargs)
        env.share_models_with(first)
        envs.append(env)
    return gym.vector.SyncVectorEnv([lambda e=e: e for e in envs])
