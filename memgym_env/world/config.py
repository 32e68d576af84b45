"""Settings of a generated world, read from ``configs/env/*.yaml`` with per-field overrides."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml

QA_CATEGORIES = ("single-session", "multi-session", "temporal")
# Where a change session tells the life event behind it. The oracle's Episodic entry and Semantic reason name the
# event, so a world whose sessions never tell it teaches a writer to invent one: second_round (AMemGym's dialogue
# shape) leaves it untold in a session of one round, opening says it in the user's first turn whatever the rounds.
TELL_EVENT = ("second_round", "opening")


@dataclass
class SessionQAConfig:
    per_session: int = 5  # MemBuilder asks about 5 questions per session
    mix: dict[str, float] = field(default_factory=lambda: {"single-session": 0.5, "multi-session": 0.3, "temporal": 0.2})


@dataclass
class WorldConfig:
    """Defaults are AMemGym's base setting (protocols §4); ``configs/env/base.yaml`` shows each one."""

    start_time: str = "2020-10-01"
    num_users: int = 20
    num_questions: int = 10
    num_periods: int = 10
    period_months: int = 3
    states_per_question: int = 2
    values_per_state: int = 3
    changes_per_period: int = 4
    changes_jitter: int = 1
    max_changes_per_state: int = 3
    min_answer_variants: int = 4
    rounds_initial: int = 1
    rounds_update: int = 2
    initial_states_per_session: int = 2
    session_hours: tuple[int, int] = (19, 22)
    seed: int = 42
    locale: str = "en_US"
    wording: str = "fixed"  # fixed: the catalog's titles and value texts | varied: each user draws other wordings, said in the dialogue (world/wording.py)
    tell_event: str = "second_round"  # where a change session tells its life event: second_round (a session of one round never does) | opening (the user's first turn)
    session_qa: SessionQAConfig = field(default_factory=SessionQAConfig)

    def check(self, where: str = "world config") -> None:
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"{where}: field '{name}' {why}")

        try:
            date.fromisoformat(self.start_time)
        except (TypeError, ValueError):
            raise bad("start_time", f"must be a YYYY-MM-DD date, got {self.start_time!r}") from None
        for name in ("num_users", "num_questions", "period_months", "states_per_question", "values_per_state",
                     "min_answer_variants", "rounds_initial", "rounds_update", "initial_states_per_session"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise bad(name, f"must be a positive integer, got {getattr(self, name)!r}")
        for name in ("num_periods", "changes_per_period", "changes_jitter", "max_changes_per_state"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise bad(name, f"must be a non-negative integer, got {getattr(self, name)!r}")
        if self.values_per_state < 2:
            raise bad("values_per_state", "must be at least 2 (a state that cannot change is no state)")
        if self.wording not in ("fixed", "varied"):
            raise bad("wording", f"must be fixed or varied, got {self.wording!r}")
        if self.tell_event not in TELL_EVENT:
            raise bad("tell_event", f"must be one of {TELL_EVENT}, got {self.tell_event!r}")
        lo, hi = self.session_hours
        if not 0 <= lo < hi <= 24:
            raise bad("session_hours", f"must be [start, end] hours with 0 <= start < end <= 24, got {self.session_hours}")
        if self.session_qa.per_session < 3:
            raise bad("session_qa.per_session", "must be at least 3")
        unknown = set(self.session_qa.mix) - set(QA_CATEGORIES)
        if unknown or not self.session_qa.mix or any(v < 0 for v in self.session_qa.mix.values()) \
                or sum(self.session_qa.mix.values()) <= 0:
            raise bad("session_qa.mix", f"must give non-negative shares of {QA_CATEGORIES}, got {self.session_qa.mix}")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["session_hours"] = list(self.session_hours)
        return out


def _coerce(name: str, value: Any, current: Any, where: str) -> Any:
    if isinstance(current, bool):
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif isinstance(current, int) and isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{where}: field '{name}' must be an integer, got {value!r}") from None
    elif isinstance(current, tuple):
        if isinstance(value, str):
            value = [v for v in value.replace("[", "").replace("]", "").split(",") if v.strip()]
        try:
            return tuple(int(v) for v in value)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: field '{name}' must be a list of integers, got {value!r}") from None
    return value


def config_from_dict(data: dict[str, Any], where: str = "world config") -> WorldConfig:
    cfg = WorldConfig()
    apply_overrides(cfg, data, where)
    return cfg


def apply_overrides(cfg: WorldConfig, data: dict[str, Any], where: str = "override") -> WorldConfig:
    """Set fields from a flat or nested mapping; dotted keys reach into ``session_qa``."""
    known = {f.name for f in dataclasses.fields(WorldConfig)}
    for key, value in data.items():
        if key == "session_qa" and isinstance(value, dict):
            for sub, v in value.items():
                apply_overrides(cfg, {f"session_qa.{sub}": v}, where)
            continue
        if key.startswith("session_qa."):
            sub = key.split(".", 1)[1]
            if sub == "per_session":
                cfg.session_qa.per_session = _coerce(key, value, 0, where)
            elif sub == "mix":
                if not isinstance(value, dict):
                    raise ValueError(f"{where}: field '{key}' must be a mapping of category -> share")
                cfg.session_qa.mix = {str(k): float(v) for k, v in value.items()}
            elif sub.startswith("mix."):
                cfg.session_qa.mix[sub[4:]] = float(value)
            else:
                raise ValueError(f"{where}: unknown field '{key}'")
            continue
        if key not in known:
            raise ValueError(f"{where}: unknown field '{key}' (known: {', '.join(sorted(known))})")
        setattr(cfg, key, _coerce(key, value, getattr(cfg, key), where))
    return cfg


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> WorldConfig:
    """Read a YAML config (the base setting when ``path`` is None) and apply ``overrides``."""
    cfg = WorldConfig()
    where = "world config"
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such config file")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML ({exc})") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of settings")
        where = str(path)
        apply_overrides(cfg, data, where)
    if overrides:
        apply_overrides(cfg, overrides, "override")
    cfg.check(where)
    return cfg


def parse_set_args(items: list[str] | None) -> dict[str, Any]:
    """``["num_users=2", "session_qa.mix.temporal=0.5"]`` -> a dict of YAML-typed values."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(raw)
    return out
