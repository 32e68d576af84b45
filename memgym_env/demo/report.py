"""The demo's report: ``report.json`` (everything), ``report.md`` (tables + plots) and the PNGs."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

from membuilder.memory.ops import AGENTS
from memgym_env.interactive.results import interval_text, notes, plot


def _fmt(v: Any) -> str:
    return "-" if v is None or v != v else f"{v:.3f}"


def _interval(ci: Any) -> str:
    """A 95% interval at the rewards' own precision (session rewards are often below 0.1)."""
    return "-" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


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


def constructor_table(comparison: dict[str, Any], results: dict[str, Any]) -> list[list[str]]:
    """MemBuilder's untrained and trained constructor on the same held-out sessions of the trained
    policy's setting: n, mean session reward and its 95% interval, JSON validity per agent, the share of
    written entries grounded in what the writer saw; then the paired difference, and the no-op and
    oracle rewards of the same sessions. Where both constructors were also played interactively (same
    answerer), their user-period cells, accuracy, memory score and write failures. A cell that does not
    apply is empty (``as_records`` leaves it out)."""
    built = comparison.get("constructors", {})
    played = all(key in results for key in (UNTRAINED, "membuilder")) and len(built) == 2
    head = ["constructor", "sessions", "mean reward", "95% CI", *(f"valid {a}" for a in AGENTS), "grounded"]
    if played:
        head += ["interactive cells", "accuracy", "memory score", "write failures"]
    blank = [""] * (len(head) - 4)
    rows = [head]
    for label, key in (("untrained", UNTRAINED), ("trained", "membuilder")):
        if label not in built:
            continue
        c = built[label]
        g = c.get("grounding") or {}
        grounded = f"{_fmt(g.get('grounded_rate'))} of {g.get('entries', 0)} entries" if g.get("entries") else "no entries"
        row = [f"{c['spec']} ({label})", str(c["n"]), _fmt(c["mean_reward"]), _interval(c.get("ci")),
               *(_fmt(c["valid_rate"][a]) for a in AGENTS), grounded]
        if played:
            r = results[key]
            cells = r.get("per_user", {}).get("accuracy", [])
            n = sum(v is not None for user in cells for v in user)
            row += [f"{n} ({len(cells)} users)", *(_fmt(r["overall"][k]) for k in ("accuracy", "memory_score", "write"))]
        rows.append(row)
    diff = comparison.get("difference")
    if diff:
        rows.append(["trained - untrained (paired by session)", str(diff["n"]), f"{diff['mean']:+.3f}",
                     _interval(diff.get("ci")), *blank])
    for name, what in (("noop", "no-op (writes nothing)"), ("oracle", "oracle (the world's ideal writes)")):
        if name in comparison:
            b = comparison[name]
            rows.append([what, str(b["n"]), _fmt(b["mean_reward"]), _interval(b.get("ci")), *blank])
    return rows


def constructor_section(meta: dict[str, Any], comparison: dict[str, Any], results: dict[str, Any]) -> list[str]:
    """report.md's lines on the untrained vs the trained constructor (``constructor_table``)."""
    rows = constructor_table(comparison, results)
    setting = comparison["setting"]
    interactive = "interactive cells" in rows[0]
    return [
        "## MemBuilder's memory constructor: untrained vs trained", "",
        f"Both constructors write the same {len(comparison['session_keys'])} held-out sessions "
        f"({len(comparison['users'])} of the users `{setting['held_out_users']}` the trained policy never saw, "
        f"sessions spread over the periods) in the setting it was trained in: `{setting['env_config']}`, "
        f"greedy outputs of at most {comparison['max_new_tokens']} tokens per agent from prompts of at most "
        f"{comparison['max_prompt_tokens']} tokens"
        + (f" (the policy was trained at {comparison['card_max_completion_tokens']}: this preset cuts its outputs, "
           "so its figures are no measure of training)" if comparison['max_new_tokens'] < comparison.get(
               'card_max_completion_tokens', comparison['max_new_tokens']) else "")
        + f". `{meta.get('untrained_constructor')}` is SmolLM2 as released, "
        f"`{meta.get('constructor')}` the trained policy shipped in the package. Reward is MemoryGym-v0's "
        "session reward; the difference is paired by session; the no-op writes nothing, the oracle the "
        "world's ideal operations (the most writing can earn here). Grounded: the share of written "
        "entries taken from the session or the memory the writer was shown. "
        + ("Interactive cells are user-periods of the demo's world, each scored on that period's questions, "
           f"with the same answerer (`{meta['model']}`)." if interactive else
           "The interactive evaluation below plays MemBuilder with the trained constructor only (`--full` "
           "plays both; `memgym evaluate --assistant membuilder --policy-model smollm2-135m` plays the untrained one)."),
        "", markdown(rows), "", f"**{comparison.get('verdict', 'trained > untrained: not shown: one constructor only')}**", "",
    ]


def as_records(rows: list[list[str]], width: int = 80) -> str:
    """A table as one block per row, for a terminal or a log of any width: the row's first cell on
    its own line, then "column value" pairs wrapped between pairs, never inside one, so no figure
    or name is ever cut (a wide table in an 80-column terminal cut every figure: ``0.5…``). Empty
    cells are left out."""
    head, blocks = rows[0], []
    for row in rows[1:]:
        lines, line = [row[0]], "  "
        for col, value in zip(head[1:], row[1:], strict=True):
            if value == "":
                continue  # a cell that does not apply to this row
            pair = f"{col} {value}"
            if line.strip() and len(line) + 3 + len(pair) > width:
                lines.append(line)
                line = "  "
            line += (" · " if line.strip() else "") + pair
        if line.strip():
            lines.append(line)
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def wrap_whole(text: str, width: int = 80) -> str:
    """A sentence wrapped at spaces, never inside a bracketed interval (``[0.012, 0.050]`` stays on one line)."""
    glued = re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace(" ", "\u00a0"), text)
    return "\n".join(textwrap.wrap(glued, width, break_long_words=False, break_on_hyphens=False)).replace("\u00a0", " ")


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]])


def time_line(stages: dict[str, dict[str, float]] | None) -> str:
    """Where the demo's time went: wall seconds per part, CPU seconds beside (both cores busy: CPU ~ 2x wall)."""
    if not stages:
        return ""
    return "Time per part (wall s / CPU s): " + ", ".join(
        f"{part} {t['wall_s']:.0f} / {t['cpu_s']:.0f}" for part, t in stages.items()) + "."


def write_report(out: Path, meta: dict[str, Any], rollouts: dict[str, Any], results: dict[str, Any],
                 comparison: dict[str, Any] | None = None) -> dict[str, Path]:
    """Writes report.json, report.md and plots/ under ``out``; returns their paths by name.
    ``comparison``: ``job.compare_constructors``'s result, where the constructors were compared."""
    plots = out / "plots"
    score_png, failures_png = plot(list(results.values()), plots)
    construction_png = construction_plot(rollouts, plots / "construction_reward.png")
    report = {"meta": meta, "construction": rollouts, "constructors": comparison,
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
           (None, meta["model"]) else ""), "", *([time_line(meta.get("stages")), ""] if meta.get("stages") else []),
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
    if comparison and comparison.get("constructors"):
        at = md.index("## Interactive evaluation: which assistant remembers the user's changing life")
        md[at:at] = constructor_section(meta, comparison, results)
    md_path = out / "report.md"
    md_path.write_text("\n".join(md), encoding="utf-8")
    return {"report.md": md_path, "report.json": json_path, "memory score plot": score_png,
            "failures plot": failures_png, "construction plot": construction_png}
