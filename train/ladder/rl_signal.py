"""What an RL run's own rollouts say about its learning signal.

The held-out curve says whether a run got better; this says whether it had anything to learn
from: the train reward early in the run against late (per agent too, each with a 95% bootstrap
interval over steps, since one step is one session and its reward is mostly that session's
difficulty), and how many agent prompts gave no gradient because all G of their rollouts scored
alike (GRPO's advantage is then zero for the whole group). It reads the run's rollout log
(``ADRPOConfig.rollout_log``: ``<run>/rollouts.<process>.jsonl``), one line per scored completion,
or the gzip copy a finished ladder stage keeps beside it (``pack_rollouts``).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from membuilder.memory.ops import AGENTS
from membuilder.plumbing.stats import against_zero, bootstrap_ci, paired_difference

ROLLOUT_GLOB = "rollouts.*.jsonl"


def rollout_logs(folder: Path) -> list[Path]:
    """Every process's rollout log in ``folder``: ``rollouts.<process>.jsonl``, or its gzip copy where the
    plain one is gone (a ladder work folder carried to another machine keeps only the copies)."""
    plain = sorted(folder.glob(ROLLOUT_GLOB))
    packed = [p for p in sorted(folder.glob(ROLLOUT_GLOB + ".gz")) if p.with_suffix("") not in plain]
    return sorted(plain + packed)


def pack_rollouts(folder: Path) -> list[Path]:
    """A gzip copy beside each plain rollout log of ``folder``, written atomically: the copies are what a
    committed ladder work folder keeps (about a tenth of the size), so a report written on another machine
    still reads the run's learning signal."""
    out = []
    for path in sorted(folder.glob(ROLLOUT_GLOB)):
        target = path.with_name(path.name + ".gz")
        tmp = target.with_name(target.name + ".tmp")
        # mtime 0: the same log always packs to the same bytes, so a rerun does not show as a change
        with open(path, "rb") as src, open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(src.read())
        os.replace(tmp, target)
        out.append(target)
    return out


def _lines(path: Path) -> list[str]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read().splitlines()
    return path.read_text(encoding="utf-8").splitlines()


def read_rollouts(folder: Path) -> list[dict[str, Any]]:
    """The train-mode records of every process's rollout log in ``folder`` (none: an empty list)."""
    records = []
    for path in rollout_logs(folder):
        for number, line in enumerate(_lines(path), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if record.get("mode", "train") == "train":
                    records.append({"step": int(record["step"]), "session": record["session_key"],
                                    "agent": record["agent"], "reward": float(record["reward"]),
                                    "completion": record.get("completion"), "k": record.get("k"),
                                    "advantage": float(record.get("advantage") or 0.0),
                                    "loss_masked": bool(record.get("loss_masked", False))})
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{path}: line {number} is not a rollout record with step, session_key, agent "
                                 f"and reward ({err})") from err
    return records


def _log_history(folder: Path) -> list[dict[str, Any]]:
    """The run's logged metrics: ``log_history.json`` of a finished run, else its last checkpoint's."""
    if (folder / "log_history.json").exists():
        return json.loads((folder / "log_history.json").read_text(encoding="utf-8"))
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(folder)) if folder.is_dir() else None
    state = Path(last) / "trainer_state.json" if last else None
    return json.loads(state.read_text(encoding="utf-8"))["log_history"] if state and state.exists() else []


def dominant_shares(folder: Path, until: int | None = None) -> dict[str, float] | None:
    """How often each memory type held most of the retrieved entries (ADRPO's alpha goes to its agent), averaged
    over the logged steps; logged under GRPO too, where alpha is 1. None when the run logged none."""
    steps = [e for e in _log_history(folder) if "adrpo/dominant_none" in e and (until is None or e["step"] <= until)]
    if not steps:
        return None
    names = [k.removeprefix("adrpo/dominant_") for k in steps[0] if k.startswith("adrpo/dominant_")]
    return {n: round(sum(float(e.get(f"adrpo/dominant_{n}", 0.0)) for e in steps) / len(steps), 4) for n in names}


ATTRIBUTION_TYPES = (*AGENTS, "none")  # what ``attribution/<rule>/dominant_<type>`` names


def _logged_steps(folder: Path, until: int | None = None) -> list[dict[str, Any]]:
    """The run's log entries merged per step, up to update ``until``: the trainer logs a step's training metrics,
    its evaluation and its closing summary as separate entries of one step, so none may hide another."""
    by_step: dict[int, dict[str, Any]] = defaultdict(dict)
    for e in _log_history(folder):
        if "step" in e and (until is None or int(e["step"]) <= until):
            by_step[int(e["step"])].update(e)
    return [by_step[s] for s in sorted(by_step)]


def dominant_by_rule(folder: Path, until: int | None = None) -> dict[str, dict[str, float]] | None:
    """Per attribution rule (``evidence``, ``retrieval``), how often each memory type (or none) held most of the
    attributed entries, averaged over the logged steps: the trainer logs both rules whichever one sets ADRPO's
    weights, so a run under one rule shows where the other would have put alpha. None when it logged neither."""
    entries = _logged_steps(Path(folder), until)
    rules = sorted({k.split("/")[1] for e in entries for k in e if k.startswith("attribution/") and "/dominant_" in k})
    out = {}
    for rule in rules:
        steps = [e for e in entries if f"attribution/{rule}/dominant_none" in e]
        if steps:
            out[rule] = {t: round(sum(float(e.get(f"attribution/{rule}/dominant_{t}", 0.0)) for e in steps)
                                  / len(steps), 4) for t in ATTRIBUTION_TYPES}
    return out or None


def time_split(folder: Path, until: int | None = None) -> dict[str, Any] | None:
    """Seconds an RL run spent generating rollouts and scoring them, from its logged ``time/generate`` and
    ``time/score`` (each entry's value is the mean per step since the entry before, so it counts once per step
    it covers): ``{"generation_s", "scoring_s", "steps"}``; None when the run logged no timing."""
    generation = scoring = 0.0
    steps, previous = 0, 0
    for e in _logged_steps(Path(folder), until):
        if "time/generate" not in e:
            continue
        covered = max(1, int(e["step"]) - previous)
        previous = int(e["step"])
        generation += float(e["time/generate"]) * covered
        scoring += float(e.get("time/score", 0.0)) * covered
        steps += covered
    if not steps:
        return None
    return {"generation_s": round(generation, 1), "scoring_s": round(scoring, 1), "steps": steps}


def _window(values_by_step: dict[int, list[float]], steps: list[int]) -> dict[str, Any]:
    """Mean over ``steps`` of each step's mean reward, with a bootstrap interval that resamples steps."""
    means = [sum(values_by_step[s]) / len(values_by_step[s]) for s in steps if values_by_step.get(s)]
    if not means:
        return {"mean": None, "ci": None, "steps": 0}
    return {"mean": round(sum(means) / len(means), 4), "ci": bootstrap_ci(means), "steps": len(means)}


def run_ends(steps: list[int], window: int | None = None) -> tuple[int, list[int], list[int]]:
    """The window (default: a quarter of the run, at least one step) and the first and last ``window`` of the
    sorted ``steps``: the two ends every early-against-late summary of a run compares."""
    window = max(1, min(window or len(steps) // 4, len(steps)))
    return window, steps[:window], steps[-window:]


def rl_signal(folder: Path, window: int | None = None, until: int | None = None) -> dict[str, Any] | None:
    """Train reward over the first and the last ``window`` steps (default: a quarter of the run), overall and
    per agent, and the share of agent prompts whose G rollouts all scored alike; None without a rollout log.
    ``until``: only the rollouts of the first ``until`` updates (a run stopped at that checkpoint)."""
    records = [r for r in read_rollouts(Path(folder)) if until is None or r["step"] < until]
    if not records:
        return None
    steps = sorted({r["step"] for r in records})
    window, first, last = run_ends(steps, window)
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
        "steps": len(steps), "window": window, "dominant": dominant_shares(Path(folder), until),
        "dominant_by_rule": dominant_by_rule(Path(folder), until),
        "first": _window(by_step, first), "last": _window(by_step, last),
        "per_agent": {a: {"first": _window(by_agent_step[a], first), "last": _window(by_agent_step[a], last)}
                      for a in AGENTS},
        "agent_prompts": len(alike),
        "frac_prompts_alike": round(sum(alike.values()) / len(alike), 4),
        "frac_prompts_alike_per_agent": {a: round(sum(v) / len(v), 4) if v else None
                                         for a, v in per_agent_alike.items()},
    }


def _step_rewards(folder: Path, until: int | None = None) -> tuple[dict[int, float], dict[int, tuple[str, ...]]]:
    """Each step's mean reward over its rollouts, and the sessions it drew."""
    rewards: dict[int, list[float]] = defaultdict(list)
    sessions: dict[int, set[str]] = defaultdict(set)
    for r in read_rollouts(Path(folder)):
        if until is None or r["step"] < until:
            rewards[r["step"]].append(r["reward"])
            sessions[r["step"]].add(r["session"])
    return ({s: sum(v) / len(v) for s, v in rewards.items()}, {s: tuple(sorted(v)) for s, v in sessions.items()})


def paired_train_difference(folder_a: Path, folder_b: Path, until: int | None = None) -> dict[str, Any] | None:
    """Train reward of run ``b`` minus run ``a``, step by step over the steps where both drew the same sessions.

    Two runs of one seed (ADRPO and GRPO) draw the same sessions in the same order, so pairing by step removes
    the session's difficulty, which dominates a step's reward; the interval resamples steps. None when no step
    pairs up."""
    ra, sa = _step_rewards(folder_a, until)
    rb, sb = _step_rewards(folder_b, until)
    steps = sorted(s for s in ra.keys() & rb.keys() if sa[s] == sb[s])
    if not steps:
        return None
    every, last = paired_difference(ra, rb, steps), paired_difference(ra, rb, steps[-max(1, len(steps) // 4):])
    return {"steps": every["n"], "mean": every["mean"], "ci": every["ci"],
            "last_steps": last["n"], "last_mean": last["mean"], "last_ci": last["ci"],
            # keyed by the update a step's rollouts made (1-based), as the curves are
            "per_step": [{"step": s + 1, "difference": round(rb[s] - ra[s], 4)} for s in steps]}


def paired_line(name_b: str, name_a: str, d: dict[str, Any]) -> str:
    """One readable line of ``paired_train_difference``'s result."""
    def part(mean, ci):
        return f"{mean:+.3f} [{ci[0]:.3f}, {ci[1]:.3f}] ({against_zero(ci)})"
    return (f"{name_b} - {name_a}, train reward paired by step (the same sessions): {part(d['mean'], d['ci'])} over "
            f"{d['steps']} steps; over the last {d['last_steps']}: {part(d['last_mean'], d['last_ci'])}")


def _mean_ci(part: dict[str, Any]) -> str:
    if part["mean"] is None:
        return "-"
    lo, hi = part["ci"]
    return f"{part['mean']:.3f} [{lo:.3f}, {hi:.3f}]"


def signal_line(stage: str, seed: int | None, signal: dict[str, Any]) -> str:
    """One readable line of ``rl_signal``'s result for the ladder's report (``seed`` None: a run of no ladder)."""
    w, n = signal["window"], signal["steps"]
    first, last = signal["first"], signal["last"]
    moved = ("up" if first["ci"] and last["ci"] and last["ci"][0] > first["ci"][1] else
             "down" if first["ci"] and last["ci"] and last["ci"][1] < first["ci"][0] else "intervals overlap")
    agents = "; ".join(f"{a} {_mean_ci(p['first'])} -> {_mean_ci(p['last'])}" for a, p in signal["per_agent"].items())
    return (f"{stage.upper()}{'' if seed is None else f' seed {seed}'}, train reward over the first {w} of {n} steps "
            f"-> the last {w}: "
            f"{_mean_ci(first)} -> {_mean_ci(last)} ({moved}); per agent: {agents}. "
            f"No gradient (all G rollouts alike) in {signal['frac_prompts_alike']:.0%} of "
            f"{signal['agent_prompts']} agent prompts" + _dominant_note(signal.get("dominant")))


def _dominant_note(dominant: dict[str, float] | None) -> str:
    if not dominant:
        return ""
    shares = ", ".join(f"{n} {v:.0%}" for n, v in sorted(dominant.items(), key=lambda kv: -kv[1]) if v)
    return f". Dominant memory type (ADRPO's alpha goes to its agent): {shares}"
