"""What an RL run's own rollouts say about its learning signal.

The held-out curve says whether a run got better; this says whether it had anything to learn
from: the train reward early in the run against late (per agent too, each with a 95% bootstrap
interval over steps, since one step is one session and its reward is mostly that session's
difficulty), and how many agent prompts gave no gradient because all G of their rollouts scored
alike (GRPO's advantage is then zero for the whole group). It reads the run's rollout log
(``ADRPOConfig.rollout_log``: ``<run>/rollouts.<process>.jsonl``), one line per scored completion.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from membuilder.ops import AGENTS
from train.bootstrap import bootstrap_ci

ROLLOUT_GLOB = "rollouts.*.jsonl"


def read_rollouts(folder: Path) -> list[dict[str, Any]]:
    """The train-mode records of every process's rollout log in ``folder`` (none: an empty list)."""
    records = []
    for path in sorted(folder.glob(ROLLOUT_GLOB)):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if record.get("mode", "train") == "train":
                    records.append({"step": int(record["step"]), "session": record["session_key"],
                                    "agent": record["agent"], "reward": float(record["reward"])})
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{path}: line {number} is not a rollout record with step, session_key, agent "
                                 f"and reward ({err})") from err
    return records


def _window(values_by_step: dict[int, list[float]], steps: list[int]) -> dict[str, Any]:
    """Mean over ``steps`` of each step's mean reward, with a bootstrap interval that resamples steps."""
    means = [sum(values_by_step[s]) / len(values_by_step[s]) for s in steps if values_by_step.get(s)]
    if not means:
        return {"mean": None, "ci": None, "steps": 0}
    return {"mean": round(sum(means) / len(means), 4), "ci": bootstrap_ci(means), "steps": len(means)}


def rl_signal(folder: Path, window: int | None = None, until: int | None = None) -> dict[str, Any] | None:
    """Train reward over the first and the last ``window`` steps (default: a quarter of the run), overall and
    per agent, and the share of agent prompts whose G rollouts all scored alike; None without a rollout log.
    ``until``: only the rollouts of the first ``until`` updates (a run stopped at that checkpoint)."""
    records = [r for r in read_rollouts(Path(folder)) if until is None or r["step"] < until]
    if not records:
        return None
    steps = sorted({r["step"] for r in records})
    window = max(1, min(window or len(steps) // 4, len(steps)))
    first, last = steps[:window], steps[-window:]
    by_step: dict[int, list[float]] = defaultdict(list)
    by_agent_step: dict[str, dict[int, list[float]]] = {a: defaultdict(list) for a in AGENTS}
    groups: dict[tuple[int, str, str], list[float]] = defaultdict(list)
    for r in records:
        by_step[r["step"]].append(r["reward"])
        if r["agent"] in by_agent_step:
            by_agent_step[r["agent"]][r["step"]].append(r["reward"])
        groups[(r["step"], r["session"], r["agent"])].append(r["reward"])
    alike = {key: max(v) == min(v) for key, v in groups.items()}
    per_agent_alike = {a: [same for (_, _, agent), same in alike.items() if agent == a] for a in AGENTS}
    return {
        "steps": len(steps), "window": window,
        "first": _window(by_step, first), "last": _window(by_step, last),
        "per_agent": {a: {"first": _window(by_agent_step[a], first), "last": _window(by_agent_step[a], last)}
                      for a in AGENTS},
        "agent_prompts": len(alike),
        "frac_prompts_alike": round(sum(alike.values()) / len(alike), 4),
        "frac_prompts_alike_per_agent": {a: round(sum(v) / len(v), 4) if v else None
                                         for a, v in per_agent_alike.items()},
    }


def _mean_ci(part: dict[str, Any]) -> str:
    if part["mean"] is None:
        return "-"
    lo, hi = part["ci"]
    return f"{part['mean']:.3f} [{lo:.3f}, {hi:.3f}]"


def signal_line(stage: str, seed: int, signal: dict[str, Any]) -> str:
    """One readable line of ``rl_signal``'s result for the ladder's report."""
    w, n = signal["window"], signal["steps"]
    first, last = signal["first"], signal["last"]
    moved = ("up" if first["ci"] and last["ci"] and last["ci"][0] > first["ci"][1] else
             "down" if first["ci"] and last["ci"] and last["ci"][1] < first["ci"][0] else "intervals overlap")
    agents = "; ".join(f"{a} {_mean_ci(p['first'])} -> {_mean_ci(p['last'])}" for a, p in signal["per_agent"].items())
    return (f"{stage.upper()} seed {seed}, train reward over the first {w} of {n} steps -> the last {w}: "
            f"{_mean_ci(first)} -> {_mean_ci(last)} ({moved}); per agent: {agents}. "
            f"No gradient (all G rollouts alike) in {signal['frac_prompts_alike']:.0%} of "
            f"{signal['agent_prompts']} agent prompts")
