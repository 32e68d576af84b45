"""The demo's report: ``report.json`` (everything), ``report.md`` (tables + plots) and the PNGs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from membuilder.ops import AGENTS
from memgym_env.interactive.results import plot


def _fmt(v: Any) -> str:
    return "-" if v is None or v != v else f"{v:.3f}"


def construction_plot(rollouts: dict[str, Any], path: Path) -> Path:
    """Grouped bars: mean MemoryGym-v0 reward of each memory agent, one group per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / max(len(rollouts), 1)
    for i, (name, r) in enumerate(rollouts.items()):
        xs = [a + i * width for a in range(len(AGENTS))]
        ax.bar(xs, [r["per_agent"][a] for a in AGENTS], width, label=f"{name} ({r['sessions']} sessions)")
    ax.set_xticks([a + width * (len(rollouts) - 1) / 2 for a in range(len(AGENTS))], AGENTS)
    ax.set(ylabel="mean reward", title="MemoryGym-v0: construction reward per agent")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def construction_table(rollouts: dict[str, Any]) -> list[list[str]]:
    head = ["policy", "sessions", "mean reward", *AGENTS]
    return [head] + [[n, str(r["sessions"]), _fmt(r["mean_reward"]), *(_fmt(r["per_agent"][a]) for a in AGENTS)]
                     for n, r in rollouts.items()]


def interactive_table(results: dict[str, Any]) -> list[list[str]]:
    head = ["assistant", "accuracy", "upper bound", "memory score", "write", "read", "utilization", "model calls"]
    rows = [head]
    for name, r in results.items():
        o = r["overall"]
        calls = int(sum(u.get("calls", 0) for u in r.get("usage_by_stage", {}).values()))
        rows.append([name, *(_fmt(o[k]) for k in ("accuracy", "upper_bound", "memory_score", "write", "read",
                                                  "utilization")), str(calls)])
    return rows


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]])


def write_report(out: Path, meta: dict[str, Any], rollouts: dict[str, Any], results: dict[str, Any]) -> dict[str, Path]:
    """Writes report.json, report.md and plots/ under ``out``; returns their paths by name."""
    plots = out / "plots"
    score_png, failures_png = plot(list(results.values()), plots)
    construction_png = construction_plot(rollouts, plots / "construction_reward.png")
    report = {"meta": meta, "construction": rollouts,
              "interactive": {k: {kk: v[kk] for kk in ("overall", "per_period", "usage_by_stage", "wall_s", "mode")}
                              for k, v in results.items()}}
    json_path = out / "report.json"
    json_path.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    rel = {p: p.relative_to(out).as_posix() for p in (score_png, failures_png, construction_png)}
    md = [
        "# MemGym demo report", "",
        f"Model `{meta['model']}` ({meta.get('engine', 'engine not recorded')}), world of {meta['sizes']['users']} users x {meta['sizes']['periods']} periods "
        f"(seed {meta['seed']}), preset `{meta['preset']}`, {meta['wall_s']:.0f} s on {meta['cpus']} CPUs "
        f"(load average at start {meta['load_average']}).", "",
        "## MemoryGym-v0: how well each policy builds memory", "",
        "Reward per session (evidence scoring: a question counts when its evidence is in the retrieved memory); "
        "the oracle writes the world's ideal operations, the empty policy writes nothing.", "",
        markdown(construction_table(rollouts)), "", f"![construction reward]({rel[construction_png]})", "",
        "## Interactive evaluation: which assistant remembers the user's changing life", "",
        "Memory score = (accuracy - random) / (upper bound - random); failures split into write "
        "(never stored), read (stored but not retrieved) and utilization (retrieved but misused).", "",
        markdown(interactive_table(results)), "",
        f"![memory score per period]({rel[score_png]})", "", f"![failures by cause]({rel[failures_png]})", "",
    ]
    md_path = out / "report.md"
    md_path.write_text("\n".join(md), encoding="utf-8")
    return {"report.md": md_path, "report.json": json_path, "memory score plot": score_png,
            "failures plot": failures_png, "construction plot": construction_png}
