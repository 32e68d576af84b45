"""Each stage pooled over its seeds, and the issue's goals read off the pooled intervals.

A stage's row per seed says how that run did; a goal ("GRPO > SFT") is about the algorithm, so its
interval must hold the spread between seeds as well as between sessions. Every figure here pools a
stage's seeds with ``stats.pooled_mean`` / ``stats.pooled_paired_difference``: each bootstrap replicate
draws seeds and sessions with replacement. A stage run once (SFT, base, or an RL stage run on one seed)
stands beside every seed of the other; two RL stages of several seeds each pair by seed (a seed's runs
start from the same SFT adapter and draw the same sessions). Each difference names the seeds of both
sides, so a one-seed side reads as what it is. Rows written before rows had ``session_noop_evidence`` give no gain, only a reward.
"""

from __future__ import annotations

from typing import Any

from membuilder.plumbing.stats import against_zero, pair_seeds, pooled_mean, pooled_paired_difference
from memgym_env.world.types import session_id_period

# (name, a, b): the pooled difference b - a
DIFFERENCES = (("SFT - base", "base", "sft"), ("GRPO - SFT", "sft", "grpo"), ("ADRPO - SFT", "sft", "adrpo"),
               ("ADRPO-retrieval - SFT", "sft", "adrpo_retrieval"), ("ADRPO - GRPO", "grpo", "adrpo"),
               ("ADRPO - ADRPO-retrieval", "adrpo_retrieval", "adrpo"))
# (goal, the difference it reads, what each side of zero means)
GOALS = (("SFT > base", "SFT - base", ("met", "not met", "not met: below")),
         ("GRPO > SFT", "GRPO - SFT", ("met", "not met", "not met: below")),
         ("ADRPO-evidence > SFT", "ADRPO - SFT", ("met", "not met", "not met: below")),
         ("ADRPO-evidence vs GRPO (published order: alpha 4 above alpha 1)", "ADRPO - GRPO",
          ("the published order", "not told apart", "the opposite of the published order")))
# A user's first period fills an empty memory with ADDs, later ones change values with edits: an RL stage can
# gain on one and lose on the other (Core REPLACE learnt from later sessions broke first ones,
# results/ladder-told-adds-lr6e-5), so each RL difference is also read on either side of that line.
PERIOD_PARTS = (("period 0", lambda period: period == 0), ("later periods", lambda period: period > 0))
SPLIT_DIFFERENCES = tuple(name for name, a, _ in DIFFERENCES if a != "base")


def by_seed(rows: list[dict[str, Any]], stage: str, key: str = "session_reward_evidence") -> dict[Any, dict]:
    """{seed: {session: value}} of ``stage``'s rows that hold ``key``."""
    return {r["seed"]: r[key] for r in rows if r["stage"] == stage and r.get(key)}


def gains_by_seed(rows: list[dict[str, Any]], stage: str) -> dict[Any, dict]:
    """{seed: {session: reward - the no-op's reward}} over the sessions a row holds both for."""
    out = {}
    for r in rows:
        reward, noop = r.get("session_reward_evidence"), r.get("session_noop_evidence")
        if r["stage"] == stage and reward and noop:
            out[r["seed"]] = {k: reward[k] - noop[k] for k in reward.keys() & noop.keys()
                              if reward[k] is not None and noop[k] is not None}
    return out


def pooled_stage(rows: list[dict[str, Any]], stage: str) -> dict[str, Any] | None:
    """A stage's reward and gain over writing nothing, each pooled over its seeds; None without a row."""
    reward = pooled_mean(by_seed(rows, stage))
    if reward is None:
        return None
    mine = [r for r in rows if r["stage"] == stage]
    alphas = {r.get("alpha") for r in mine}
    rules = {r.get("attribution") for r in mine}
    return {"stage": stage, "alpha": alphas.pop() if len(alphas) == 1 else None,
            "attribution": rules.pop() if len(rules) == 1 else None,
            "reward_mode": next((r["reward_mode"] for r in mine if r.get("reward_mode")), None),
            "reward": reward, "gain": pooled_mean(gains_by_seed(rows, stage))}


def _sessions_of(by: dict[Any, dict], keep) -> dict[Any, dict]:
    """``by_seed``'s sessions whose world period ``keep`` accepts (a key naming no period is left out)."""
    return {seed: {k: v for k, v in sessions.items() if (p := session_id_period(k)) is not None and keep(p)}
            for seed, sessions in by.items()}


def differences(rows: list[dict[str, Any]], names=None, keep=None) -> dict[str, dict[str, Any]]:
    """``DIFFERENCES`` (those in ``names``, default all) that both stages have rows for, each with how its
    interval reads against zero; over the sessions whose period ``keep`` accepts, when given."""
    out = {}
    for name, a, b in DIFFERENCES:
        if names is not None and name not in names:
            continue
        seeds_a, seeds_b = by_seed(rows, a), by_seed(rows, b)
        if keep is not None:
            seeds_a, seeds_b = _sessions_of(seeds_a, keep), _sessions_of(seeds_b, keep)
        d = pooled_paired_difference(seeds_a, seeds_b)
        if d is not None:
            pairs = pair_seeds(seeds_a, seeds_b)
            out[name] = {**d, "a": a, "b": b, "reads": against_zero(d["ci"]),
                         "seeds_a": list(dict.fromkeys(x for x, _ in pairs)),
                         "seeds_b": list(dict.fromkeys(x for _, x in pairs))}
    return out


def goals(diffs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's goals, each read off its pooled difference: above zero, zero inside, below."""
    out = []
    for goal, name, words in GOALS:
        d = diffs.get(name)
        if d is not None:
            word = words[("above", "zero inside", "below").index(d["reads"])]
            out.append({"goal": goal, "difference": name, "verdict": word, **{k: d[k] for k in ("mean", "ci", "reads")}})
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``ladder_summary.json`` holds: every stage pooled, the pooled differences and the goals."""
    stages = list(dict.fromkeys(r["stage"] for r in rows))
    diffs = differences(rows)
    by_period = {part: d for part, keep in PERIOD_PARTS if (d := differences(rows, SPLIT_DIFFERENCES, keep))}
    return {"stages": {s: p for s in stages if (p := pooled_stage(rows, s))}, "differences": diffs,
            "by_period": by_period, "goals": goals(diffs),
            "how": "95% percentile bootstraps; each replicate draws seeds and sessions with replacement; a stage run "
                   "once (base, SFT) stands beside every seed of the other; RL stages pair by seed"}


def _ci(ci) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def _seeds(p: dict[str, Any]) -> str:
    return ", ".join(map(str, p["seeds"]))


def stage_table(s: dict[str, Any]) -> str:
    """Each stage's pooled reward and gain over writing nothing (fits 80 columns)."""
    lines = ["| stage | seeds | sessions | reward [95% CI] | gain over no-op [95% CI] |", "|---|---|---|---|---|"]
    for p in s["stages"].values():
        r, g = p["reward"], p["gain"]
        gain = f"{g['mean']:+.3f} {_ci(g['ci'])}" if g else "-"
        lines.append(f"| {p['stage']} | {_seeds(r)} | {r['n_sessions']} | {r['mean']:.3f} {_ci(r['ci'])} | {gain} |")
    return "\n".join(lines)


def difference_lines(s: dict[str, Any]) -> list[str]:
    """One line per pooled paired difference."""
    return [f"{name} ({d['b']} {_named(d['seeds_b'])} against {d['a']} {_named(d['seeds_a'])}), over "
            f"{d['n_sessions']} sessions: {d['mean']:+.3f} {_ci(d['ci'])} ({d['reads']})"
            for name, d in s["differences"].items()]


def period_lines(s: dict[str, Any]) -> list[str]:
    """One line per RL difference and side of the period-0 line, where both sides hold sessions."""
    parts = s.get("by_period", {})
    if len(parts) < len(PERIOD_PARTS):
        return []
    return [f"{name}, {part}: {d['mean']:+.3f} {_ci(d['ci'])} over {d['n_sessions']} sessions ({d['reads']})"
            for name in SPLIT_DIFFERENCES for part, _ in PERIOD_PARTS if (d := parts[part].get(name))]


def _named(seeds: list) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def goal_lines(s: dict[str, Any]) -> list[str]:
    """One line per goal: its verdict and the interval it rests on."""
    return [f"{g['goal']}, pooled over seeds and sessions: {g['verdict']} ({g['difference']} {g['mean']:+.3f} "
            f"{_ci(g['ci'])}, {'zero inside the interval' if g['reads'] == 'zero inside' else g['reads'] + ' zero'})"
            for g in s["goals"]]
