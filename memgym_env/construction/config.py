"""Every setting of MemoryGym-v0, in one dataclass; ``configs/env/construction.yaml`` shows them all.

Training configs name an env config and override it with these same field names
(``env_config`` + ``env_overrides``), so the env, SFT, RL and the ladder read one dialect.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from membuilder.reward import LAMBDA, check_lambda
from memgym_env.benchmarks.judges import JUDGE_PROMPTS
from memgym_env.construction.answers import ANSWER_MODES

SNAPSHOT_MODES = ("expert", "on_policy")


@dataclass
class ConstructionConfig:
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
    judge_prompt: str = "locomo"  # the judge prompt of memgym_env.benchmarks.judges that grades "llm" answers
    answer_max_tokens: int = 48  # an answer cut at this limit is counted and warned about
    judge_max_tokens: int = 24  # likewise for a written verdict
    chat_template_kwargs: dict[str, Any] | None = field(default_factory=lambda: {"enable_thinking": False})
    embedder: str = "minilm"
    snapshot: str = "expert"  # "expert" | "on_policy"
    lam: float = LAMBDA  # length-penalty weight; 0 = no length penalty
    alpha: float = 4.0  # ADRPO weight of the dominant memory type's agent; 1 = plain GRPO
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
        if self.judge_prompt not in JUDGE_PROMPTS:
            raise ValueError(f"judge_prompt {self.judge_prompt!r}; expected one of {JUDGE_PROMPTS}")
        if not isinstance(self.reward_density, int) or self.reward_density < 1:
            raise ValueError(f"reward_density must be an integer >= 1; got {self.reward_density!r}")
        try:
            self.lam = check_lambda(self.lam)
        except ValueError as exc:
            raise ValueError(f"lam: {exc}") from None
        if not isinstance(self.alpha, (int, float)) or self.alpha < 1:
            raise ValueError(f"alpha must be a number >= 1 (1 = plain GRPO); got {self.alpha!r}")

    @classmethod
    def from_yaml(cls, path: str | Path | None, **overrides: Any) -> ConstructionConfig:
        """The config in ``path`` (None: the defaults) with ``overrides`` (same field names) on top."""
        import yaml

        data = {}
        if path is not None:
            path = Path(path)
            if not path.exists():
                raise ValueError(f"env config {path} does not exist")
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if not isinstance(data, dict):
                raise ValueError(f"{path}: expected a mapping of ConstructionConfig fields")
        known = {f.name for f in fields(cls)}
        for where, given in ((str(path), data), ("overrides", overrides)):
            unknown = sorted(set(given) - known)
            if unknown:
                raise ValueError(f"{where}: unknown ConstructionConfig fields {unknown}; known: {sorted(known)}")
        return cls(**{**data, **overrides})
