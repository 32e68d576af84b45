"""The demo's report: ``report.json`` (everything), ``report.md`` (tables + plots) and the PNGs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from membuilder.memory.ops import AGENTS
from memgym_env.interactive.results import interval_text, notes, plot


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
    head = ["assistant", "questions", "accuracy", "95% CI", "upper bound", "memory score", "95% CI", "write", "read",
            "utilization", "model calls"]
    rows = [head]
    for name, r in results.items():
        o = r["overall"]
        calls = int(sum(u.get("calls", 0) for u in r.get("usage_by_stage", {}).values()))
        rows.append([name, str(o.get("questions", "-")), _fmt(o["accuracy"]), interval_text(o.get("accuracy_ci95")),
                     _fmt(o["upper_bound"]), _fmt(o["memory_score"]), interval_text(o.get("memory_score_ci95")),
                     *(_fmt(o[k]) for k in ("write", "read", "utilization")), str(calls)])
    return rows


UNTRAINED = "membuilder-untrained"  # memgym_env.demo.job.UNTRAINED (not imported: that module loads the env)


def trained_table(meta: dict[str, Any], rollouts: dict[str, Any], results: dict[str, Any]) -> list[list[str]]:
    """MemBuilder with the untrained and the trained memory constructor, one row each: MemoryGym-v0
    on the same sessions (count, mean reward, share of valid agent outputs, reward per agent) and,
    where both were played, the interactive run (same answerer: user-period cells, accuracy,
    memory score, write failures)."""
    pairs = [(spec, key) for key, spec in ((UNTRAINED, meta.get("untrained_constructor")),
                                           ("membuilder", meta.get("constructor"))) if spec and key in rollouts]
    played = len(pairs) == 2 and all(key in results for _, key in pairs)
    head = ["constructor", "sessions", "mean reward", "valid outputs", *AGENTS]
    if played:
        head += ["interactive cells", "accuracy", "memory score", "write failures"]
    rows = [head]
    for spec, key in pairs:
        built = rollouts[key]
        valid = sum(built["valid"].values()) / max(len(built["valid"]), 1)
        row = [f"{spec} ({'untrained' if key == UNTRAINED else 'trained'})", str(built["sessions"]),
               _fmt(built["mean_reward"]), _fmt(valid), *(_fmt(built["per_agent"][a]) for a in AGENTS)]
        if played:
            r = results[key]
            cells = r.get("per_user", {}).get("accuracy", [])
            n = sum(v is not None for user in cells for v in user)
            row += [f"{n} ({len(cells)} users)", *(_fmt(r["overall"][k]) for k in ("accuracy", "memory_score", "write"))]
        rows.append(row)
    return rows


def as_records(rows: list[list[str]], width: int = 80) -> str:
    """A table as one block per row, for a terminal or a log of any width: the row's first cell on
    its own line, then "column value" pairs wrapped between pairs, never inside one, so no figure
    or name is ever cut (a wide table in an 80-column terminal cut every figure: ``0.5…``)."""
    head, blocks = rows[0], []
    for row in rows[1:]:
        lines, line = [row[0]], "  "
        for col, value in zip(head[1:], row[1:], strict=True):
            pair = f"{col} {value}"
            if line.strip() and len(line) + 3 + len(pair) > width:
                lines.append(line)
                line = "  "
            line += (" · " if line.strip() else "") + pair
        if line.strip():
            lines.append(line)
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]])


def write_report(out: Path, meta: dict[str, Any], rollouts: dict[str, Any], results: dict[str, Any]) -> dict[str, Path]:
    """Writes report.json, report.md and plots/ under ``out``; returns their paths by name."""
    plots = out / "plots"
    score_png, failures_png = plot(list(results.values()), plots)
    construction_png = construction_plot(rollouts, plots / "construction_reward.png")
    report = {"meta": meta, "construction": rollouts,
              "interactive": {k: {kk: v.get(kk) for kk in ("overall", "per_period", "usage_by_stage", "wall_s", "mode",
                                                           "constructor")}
                              for k, v in results.items()}}
    json_path = out / "report.json"
    json_path.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    rel = {p: p.relative_to(out).as_posix() for p in (score_png, failures_png, construction_png)}
    md = [
        "# MemGym demo report", "",
        f"Model `{meta['model']}` ({meta.get('engine', 'engine not recorded')}), world of {meta['sizes']['users']} users x {meta['sizes']['periods']} periods "
        f"(seed {meta['seed']}), preset `{meta['preset']}`, {meta['wall_s']:.0f} s on {meta['cpus']} CPUs "
        f"(load average at start {meta['load_average']})."
        + (f" MemBuilder's memory is written by `{meta['constructor']}`." if meta.get("constructor") not in
           (None, meta["model"]) else ""), "",
        "## MemoryGym-v0: how well each policy builds memory", "",
        "Reward per session (evidence scoring: a question counts when its evidence is in the retrieved memory); "
        "the oracle writes the world's ideal operations, the empty policy writes nothing.", "",
        markdown(construction_table(rollouts)), "", f"![construction reward]({rel[construction_png]})", "",
        "## Interactive evaluation: which assistant remembers the user's changing life", "",
        "Memory score = (accuracy - random) / (upper bound - random); failures split into write "
        "(never stored), read (stored but not retrieved) and utilization (retrieved but misused).", "",
        markdown(interactive_table(results)), "", *notes(list(results.values())).strip().splitlines(), "",
        f"![memory score per period]({rel[score_png]})", "", f"![failures by cause]({rel[failures_png]})", "",
    ]
    compared = trained_table(meta, rollouts, results)
    if len(compared) > 2:
        interactive = "interactive cells" in compared[0]
        at = md.index("## Interactive evaluation: which assistant remembers the user's changing life")
        md[at:at] = [
            "## MemBuilder's memory constructor: untrained vs trained", "",
            f"The same world, sessions and answerer (`{meta['model']}`); only the model writing MemBuilder's memory "
            f"differs: `{meta['untrained_constructor']}` as released and `{meta['constructor']}`, the trained policy "
            f"shipped in the package. MemoryGym-v0 columns count sessions of the first user (each agent writes "
            f"at most {meta['sizes']['policy_tokens']} tokens); "
            + ("interactive cells are user-periods, each scored on that period's questions." if interactive else
               "the interactive evaluation below plays MemBuilder with the trained constructor only (a second run "
               "for the untrained one is part of `--full`; `memgym evaluate --assistant membuilder "
               "--policy-model smollm2-135m` plays it)."), "",
            markdown(compared), "",
        ]
    md_path = out / "report.md"
    md_path.write_text("\n".join(md), encoding="utf-8")
    return {"report.md": md_path, "report.json": json_path, "memory score plot": score_png,
            "failures plot": failures_png, "construction plot": construction_png}
