"""What the policies write: the kind of memory operation each output chooses, per agent.

A reward says how well a stage did; this says what it does differently. Every output of an agent falls
in one kind (``KINDS``):

* ``new``: writes new memory only (ADD, Core's APPEND). It always lands.
* ``edit``: quotes memory that must already exist (UPDATE, MERGE, Core's REPLACE and REWRITE). A Core
  REPLACE whose quoted text is not in the block changes nothing; an UPDATE whose quoted entry is not found
  is written as a new entry (``membuilder.memory``).
* ``nothing``: valid, and writes nothing (an empty list, or only SKIP).
* ``invalid``: the parser rejects it (the reward's validity gate).

Read off a stage's held-out outputs (greedy; ``held_out_actions``) and off an RL run's rollout log
(sampled; ``rollout_actions``), where each kind's mean advantage says which way the gradient pushed it.
``edit_gap`` asks the reward itself: where one group (an agent's G rollouts of one session) sampled both an
edit and new memory only, how much more the edits earned. Near zero, RL has no reason to keep editing.
``write_push`` reads the first choice an output makes, to write or not: a failed write (invalid, or cut at the
token limit) begins as a valid one does, so its negative advantage lowers the odds of writing at all, and a
group's advantages sum to zero, so what writing loses there, writing nothing gains.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from membuilder.memory.ops import AGENTS, Add, CoreAppend, Skip, parse
from membuilder.plumbing.stats import bootstrap_ci
from train.ladder.rl_signal import read_rollouts, run_ends
from train.ladder.settings import STAGES

# Line style of an RL run in the ladder's plots, by its seed's place among the seeds plotted; dotted is kept for a
# run stopped part-way. Colour says the stage.
SEED_LINES = ("-", "--", "-.")
# Legend handles long enough to show a whole dash-dot period at the plots' 2-point lines (the default 2 font sizes
# shows its first dash only, so seed 2 read as solid, like seed 0)
LEGEND_HANDLE = 4.0


def seed_line(seed: int, seeds: list[int], stopped: bool = False) -> str:
    return ":" if stopped else SEED_LINES[seeds.index(seed) % len(SEED_LINES)]

KINDS = ("new", "edit", "nothing", "invalid")
EDIT_NAMES = "UPDATE, MERGE, REPLACE, REWRITE"
MIN_ROLLOUTS = 10  # a kind's mean advantage is read in a report line only over at least this many rollouts


def kind(agent: str, text: Any) -> str:
    """The kind of one agent output (an output that both adds and edits counts as an edit: it quotes memory)."""
    parsed = parse(agent, text)
    if not parsed.valid:
        return "invalid"
    ops = [op for op in parsed.ops if not isinstance(op, Skip)]
    if not ops:
        return "nothing"
    return "new" if all(isinstance(op, (Add, CoreAppend)) for op in ops) else "edit"


def _shares(counts: Counter, n: int) -> dict[str, float]:
    return {k: round(counts[k] / n, 4) if n else 0.0 for k in KINDS}


def held_out_actions(outputs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Per agent, the share of each kind over a stage's held-out outputs ({session: {agent: text}}), with the
    count it rests on and the operations per valid output."""
    out: dict[str, Any] = {}
    for agent in AGENTS:
        texts = [o[agent] for o in outputs.values() if agent in o]
        counts = Counter(kind(agent, t) for t in texts)
        valid = [parse(agent, t) for t in texts]
        ops = [len(p.ops) for p in valid if p.valid]
        out[agent] = {"outputs": len(texts), "shares": _shares(counts, len(texts)),
                      "ops_per_output": round(sum(ops) / len(ops), 3) if ops else None}
    return out


def edits_against_expert(outputs: dict[str, dict[str, str]], expert: dict[str, dict[str, str]],
                         missed: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """Per agent, a stage's held-out edits held against the expert's on the same sessions.

    A session changing some value does not mean every memory must change: a changed stress level is Core's,
    not Procedural's. So ``needed`` counts the sessions where the expert edits that agent's memory; of those,
    ``edited`` where the stage edits it too and ``landed`` where its edit also found what it quotes (``missed``:
    per session and agent, the quotes the model-free reward could not find). ``false`` counts the edits the
    stage writes on the ``not_needed`` sessions, where the expert leaves that memory's entries as they are.
    """
    out: dict[str, Any] = {}
    for agent in AGENTS:
        keys = [k for k in outputs if agent in outputs[k] and k in expert]
        needed = {k for k in keys if kind(agent, expert[k].get(agent, "")) == "edit"}
        edits = {k for k in keys if kind(agent, outputs[k][agent]) == "edit"}
        edited = needed & edits
        out[agent] = {"needed": len(needed), "edited": len(edited),
                      "landed": None if missed is None else sum(not missed.get(k, {}).get(agent) for k in edited),
                      "not_needed": len(keys) - len(needed), "false": len(edits - needed)}
    return out


def _window(records: list[dict[str, Any]]) -> dict[str, Any]:
    counts: Counter = Counter()
    advantages: dict[str, list[float]] = defaultdict(list)
    for r in records:
        counts[r["kind"]] += 1
        advantages[r["kind"]].append(r["advantage"])
    return {"rollouts": len(records), "counts": {k: counts[k] for k in KINDS}, "shares": _shares(counts, len(records)),
            # GRPO's group-normalised advantage, before ADRPO's weight: above 0, the update made that kind likelier
            "mean_advantage": {k: round(sum(v) / len(v), 4) for k, v in sorted(advantages.items())}}


def edit_gap(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Mean reward of the ``edit`` rollouts minus that of the ``new`` ones, within each group (one step, session
    and agent) that sampled both, averaged over those groups with a 95% bootstrap over groups; None where no
    group sampled both. Comparing inside a group holds the session fixed: what is left is the reward's view of
    editing against adding beside the stale entry."""
    groups: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["kind"] in ("edit", "new"):
            groups[(r["step"], r["session"])][r["kind"]].append(float(r["reward"]))
    gaps = [sum(g["edit"]) / len(g["edit"]) - sum(g["new"]) / len(g["new"]) for g in groups.values()
            if g["edit"] and g["new"]]
    if not gaps:
        return None
    return {"mean": round(sum(gaps) / len(gaps), 4), "ci": bootstrap_ci(gaps), "groups": len(gaps)}


def write_push(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The advantage the loss puts on writing at all, per group (one step, session and agent) on average: summed
    over the valid writes (``new`` and ``edit``), over the failed ones (``invalid``) and over ``nothing``, counting
    only rollouts in the loss (``mask_truncated_completions`` leaves cut ones out: ``left_out``). The first tokens
    of every write are alike, so at that choice the push on writing is ``valid + failed`` (= -``nothing`` where
    every rollout is in the loss). None without rollouts."""
    groups = {(r["step"], r["session"]) for r in records}
    if not groups:
        return None
    in_loss = [r for r in records if not r.get("loss_masked")]

    def per_group(kinds: tuple[str, ...]) -> float:
        return round(sum(r["advantage"] for r in in_loss if r["kind"] in kinds) / len(groups), 4)

    valid, failed = per_group(("new", "edit")), per_group(("invalid",))
    return {"groups": len(groups), "valid": valid, "failed": failed, "writing": round(valid + failed, 4),
            "nothing": per_group(("nothing",)), "left_out": sum(r.get("loss_masked", False) for r in records)}


def rollout_actions(folder: Path, bucket: int = 5, window: int | None = None,
                    until: int | None = None) -> dict[str, Any] | None:
    """Per agent: the kinds' shares over the first and the last ``window`` steps (default: a quarter of the run)
    with their mean advantage, and the ``edit`` share per ``bucket`` steps; None without a rollout log.
    ``until``: only the rollouts of the first ``until`` updates (a run stopped at that checkpoint)."""
    records = [r for r in read_rollouts(Path(folder)) if until is None or r["step"] < until]
    if not records:
        return None
    for r in records:
        r["kind"] = kind(r["agent"], r["completion"]) if r["agent"] in AGENTS else "invalid"
    steps = sorted({r["step"] for r in records})
    window, first, last = run_ends(steps, window)
    first, last = set(first), set(last)
    out: dict[str, Any] = {"steps": len(steps), "window": window, "bucket": bucket, "agents": {}}
    for agent in AGENTS:
        mine = [r for r in records if r["agent"] == agent]
        by_bucket: dict[int, list[str]] = defaultdict(list)
        for r in mine:
            by_bucket[r["step"] // bucket].append(r["kind"])
        out["agents"][agent] = {
            "first": _window([r for r in mine if r["step"] in first]),
            "last": _window([r for r in mine if r["step"] in last]),
            # keyed by the last update of the bucket (1-based), as the curves are
            "edit_share": [{"step": min((b + 1) * bucket, steps[-1] + 1), "share": round(v.count("edit") / len(v), 4)}
                           for b, v in sorted(by_bucket.items())],
            "edit_minus_new": edit_gap(mine),  # over the whole run: the reward is the same at every step
            "write_push": write_push(mine),
        }
    return out


def _pct(shares: dict[str, float]) -> str:
    return " / ".join(f"{k} {shares[k]:.0%}" for k in KINDS if shares.get(k))


def held_out_line(stage: str, seed: int, actions: dict[str, Any]) -> str:
    """One readable line of ``held_out_actions``: per agent, the kinds' shares of its held-out outputs."""
    n = max((a["outputs"] for a in actions.values()), default=0)
    return (f"{stage.upper()}{'' if stage in ('base', 'sft') else f' seed {seed}'}, {n} held-out outputs per agent: "
            + "; ".join(f"{agent} {_pct(a['shares'])}" for agent, a in actions.items()))


def rollout_line(stage: str, seed: int | None, actions: dict[str, Any]) -> str:
    """One readable line of ``rollout_actions``: per agent, how the kinds' shares moved over the run and which
    kind the advantages favoured."""
    w, n = actions["window"], actions["steps"]
    parts = []
    for agent, a in actions["agents"].items():
        first, last = a["first"]["shares"], a["last"]["shares"]
        moved = max(KINDS, key=lambda k: abs(last[k] - first[k]))
        counts = a["first"]["counts"]
        favoured = max(((k, v) for k, v in a["first"]["mean_advantage"].items() if counts[k] >= MIN_ROLLOUTS),
                       key=lambda kv: kv[1], default=None)
        parts.append(f"{agent} {moved} {first[moved]:.0%} -> {last[moved]:.0%}"
                     + (f" (early mean advantage highest for {favoured[0]}, {favoured[1]:+.2f})" if favoured else ""))
    return (f"{stage.upper()}{'' if seed is None else f' seed {seed}'}, sampled rollouts, the first {w} of {n} steps "
            f"-> the last {w}, the kind that moved most: " + "; ".join(parts))


def gap_line(stage: str, seed: int | None, actions: dict[str, Any]) -> str | None:
    """One readable line of each agent's ``edit_gap`` in an RL run's rollouts; None where no agent has one."""
    parts = []
    for agent, a in actions["agents"].items():
        gap = a.get("edit_minus_new")
        if gap:
            lo, hi = gap["ci"]
            parts.append(f"{agent} {gap['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}] over {gap['groups']} groups")
    if not parts:
        return None
    return (f"{stage.upper()}{'' if seed is None else f' seed {seed}'}, reward of an edit minus new memory only, "
            "within the groups that sampled both (95% bootstrap over groups): " + "; ".join(parts))


def push_line(stage: str, seed: int | None, actions: dict[str, Any]) -> str | None:
    """One readable line of each agent's ``write_push``; None where no agent has one."""
    parts = []
    for agent, a in actions["agents"].items():
        push = a.get("write_push")
        if push:
            left = f", {push['left_out']} cut rollouts left out of the loss" if push["left_out"] else ""
            parts.append(f"{agent} {push['writing']:+.2f} (valid writes {push['valid']:+.2f}, failed "
                         f"{push['failed']:+.2f}{left})")
    if not parts:
        return None
    return (f"{stage.upper()}{'' if seed is None else f' seed {seed}'}, summed advantage on writing at all per group "
            "(below 0, the update makes writing nothing likelier): " + "; ".join(parts))


def plot_actions(runs: list[dict[str, Any]], path: Path) -> None:
    """One panel per agent: each RL run's share of rollouts that edit existing memory, per bucket of steps,
    against the SFT policy's held-out share (greedy) as a grey line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(AGENTS), figsize=(16.5, 3.6), sharey=True)
    sft = next((r.get("held_out_actions") for r in runs if r["stage"] == "sft"), None)
    seeds = sorted({r["seed"] for r in runs if r.get("train_actions")})
    for ax, agent in zip(axes, AGENTS, strict=True):
        for r in runs:
            series = (r.get("train_actions") or {}).get("agents", {}).get(agent, {}).get("edit_share")
            if not series:
                continue
            ls = seed_line(r["seed"], seeds, "steps" in r)
            color = f"C{STAGES.index(r['stage'])}" if r["stage"] in STAGES else "C0"
            ax.plot([p["step"] for p in series], [p["share"] for p in series], ls, color=color, lw=1.8,
                    label=r.get("label") or f"{r['stage']} seed {r['seed']}")
        if sft:
            ax.axhline(sft[agent]["shares"]["edit"], color="grey", lw=1, label="SFT, held-out (greedy)")
        ax.set_title(f"{agent}: share of outputs that edit", fontsize=10)
        ax.set_xlabel("RL step")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7, handlelength=LEGEND_HANDLE)
    axes[0].set_ylabel(f"share ({EDIT_NAMES})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
