"""Results of interactive runs: per-period arrays, the table, the plots, and run comparisons."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from membuilder.plumbing.json_files import read_json, write_json
from memgym_env.interactive import metrics
from memgym_env.interactive.run_files import period_dir
from memgym_env.interactive.simulator import reads_replies
from memgym_env.world.types import World, WorldUser

RESULTS_FILE = "results.json"


def _load_periods(run: Path, user: WorldUser) -> list[dict[str, Any]]:
    out = []
    for p in range(len(user.periods)):
        path = period_dir(run, user.id, p) / "evaluation.json"
        if not path.exists():
            break
        out.append(read_json(path))  # depth- and size-guarded; a ValueError naming the file
    return out


def _rows(x: np.ndarray) -> list[list[float | None]]:
    return [[None if np.isnan(v) else round(float(v), 4) for v in row] for row in np.atleast_2d(x)]


def _vec(x: np.ndarray) -> list[float | None]:
    return [None if np.isnan(v) else round(float(v), 4) for v in x]


def collect_results(run: Path, world: World, users: Sequence[WorldUser], meta: dict[str, Any],
                    wall_s: float | None = None) -> dict[str, Any]:
    """Every metric of a run folder, from its ``evaluation.json`` files. ``wall_s`` defaults to
    the seconds spent in the periods, summed (what a parallel run can say per assistant)."""
    correct, ub, n_choices, labels, recall, parsed, usage = [], [], [], [], [], [], {}
    overlap: list[bool] = []  # MemBuilder's evidence overlap, a diagnostic apart from factual recall
    period_s = 0.0
    for user in users:
        evals = _load_periods(run, user)
        states = [p.state for p in user.periods]
        c = [[q["correct"] for q in e["questions"]] for e in evals]
        recalled = [{a["variable"]: a["correct"] for a in e["probes"]} for e in evals]
        required = [q["required_info"] for q in evals[0]["questions"]] if evals else []
        correct.append(c)
        ub.append([e["upper_bound"] for e in evals])
        n_choices.append([[q["n_choices"] for q in e["questions"]] for e in evals])
        labels.append(metrics.diagnose_user(states, c, required, recalled) if all(recalled) else [])
        recall.append([metrics.factual_recall([f["supported"] for f in e["factual_recall"]]) for e in evals])
        parsed += [q["parsed"] for e in evals for q in e["questions"] + e["probes"]]
        overlap += [f["evidence_overlap"] for e in evals for f in e["factual_recall"] if "evidence_overlap" in f]
        for e in evals:
            period_s += float(e.get("wall_s", 0.0))
            for purpose, u in e.get("usage", {}).items():
                acc = usage.setdefault(purpose, {})
                for k, v in u.items():
                    acc[k] = round(acc.get(k, 0) + v, 3)
    acc = metrics.accuracy(correct)
    upper = metrics.accuracy(ub)
    rand = metrics.random_baseline(n_choices)
    score = metrics.memory_score(acc, upper, rand)
    low = metrics.low_headroom(upper, rand)
    n_questions = [sum(len(u[p]) for u in correct if p < len(u)) for p in range(acc.shape[1])]
    n_right = sum(bool(x) for u in correct for qs in u for x in qs)
    ci = metrics.wilson(n_right, sum(n_questions))
    score_ci = metrics.score_interval(correct, upper, rand)
    rates = metrics.diagnosis_rates(labels)
    recall_arr = metrics._per_period([[[r] for r in u] for u in recall], lambda xs: xs[0])
    per_period = {
        "accuracy": _vec(_colmean(acc)), "upper_bound": _vec(_colmean(upper)), "random": _vec(_colmean(rand)),
        "memory_score": _vec(_colmean(score)), "factual_recall": _vec(_colmean(recall_arr)),
        **{k: _vec(rates[k]) for k in metrics.FAILURES},
        "questions": n_questions, "low_headroom_cells": [int(low[:, p].sum()) for p in range(low.shape[1])],
    }
    overall = {"accuracy": metrics.nanmean(acc), "upper_bound": metrics.nanmean(upper),
               "random": metrics.nanmean(rand), "memory_score": metrics.nanmean(score),
               "memory_score_cells_undefined": int(np.sum(np.isnan(score) & ~np.isnan(acc))),
               "memory_score_cells": int(np.sum(~np.isnan(score))),
               "memory_score_cells_low_headroom": int(low.sum()), "min_headroom": metrics.MIN_HEADROOM,
               "questions": sum(n_questions), "accuracy_ci95": None if ci is None else [round(x, 4) for x in ci],
               "memory_score_ci95": None if score_ci is None else [round(x, 4) for x in score_ci],
               "factual_recall": metrics.nanmean(recall_arr),
               "evidence_overlap": sum(overlap) / len(overlap) if overlap else None,
               # no diagnosis without probes (or with a user's unanswered): None, as JSON has no NaN
               **{k: None if np.isnan(v) else v for k, v in metrics.overall_rates(labels).items()
                  if k in metrics.FAILURES},
               "unparsed_answers": int(sum(not p for p in parsed))}
    return {**{k: meta.get(k) for k in ("assistant", "mode", "model", "constructor", "simulator", "replay", "evolve",
                                         "world", "workers")},
            "users": [u.id for u in users], "overall": overall, "per_period": per_period,
            "per_user": {"accuracy": _rows(acc), "upper_bound": _rows(upper), "random": _rows(rand),
                         "memory_score": _rows(score), "factual_recall": _rows(recall_arr),
                         "diagnosis": labels},
            "usage_by_stage": usage, "wall_s": round(period_s if wall_s is None else wall_s, 1),
            "policy_note": policy_note(meta)}


def policy_note(meta: dict[str, Any]) -> str | None:
    """What "on-policy" means for this run, when it is less than it says."""
    if meta.get("mode") != "on-policy" or meta.get("simulator") not in ("template", "llm"):
        return None
    if reads_replies(meta["simulator"]):
        return None
    return (f"the {meta['simulator']} simulator does not read the assistant's replies, so this run is on-policy only "
            "in the assistant's own turns: the user's turns are those an off-policy run would see "
            "(--simulator llm writes them from the whole conversation)")


def _colmean(x: np.ndarray) -> np.ndarray:
    return np.array([metrics.nanmean(x[:, p]) for p in range(x.shape[1])]) if x.size else np.array([])


def _fmt(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.3f}"


def interval_text(ci: Any) -> str:
    return "-" if not ci else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def run_label(r: dict[str, Any]) -> str:
    """The assistant, and the model writing its memory: always for MemBuilder (with SmolLM2 either the
    trained policy or the untrained model writes, and two such runs sit side by side), else where it is
    not the run's model."""
    writer = r.get("constructor")
    shown = writer is not None and (r["assistant"] == "membuilder" or writer != r.get("model"))
    return r["assistant"] + (f" [writes with {writer}]" if shown else "")


def table(results: Sequence[dict[str, Any]]) -> str:
    """One row per run: accuracy, memory score, diagnosis, factual recall, calls and tokens by stage."""
    head = ["assistant", "mode", "n", "acc", "acc 95% CI", "UB", "rand", "score", "score 95% CI", "write", "read", "util",
            "recall", "calls/tokens by stage"]
    rows = []
    for r in results:
        o = r["overall"]
        stages = ", ".join(f"{k} {int(u.get('calls', 0))}/{int(u.get('prompt_tokens', 0) + u.get('completion_tokens', 0))}"
                           for k, u in sorted(r.get("usage_by_stage", {}).items()))
        label = run_label(r) + (f" [evolve {r['evolve']}]" if r.get("evolve") not in (None, "none") else "")
        rows.append([label, r["mode"], str(o.get("questions", "-")), _fmt(o["accuracy"]), interval_text(o.get("accuracy_ci95")),
                     *(_fmt(o[k]) for k in ("upper_bound", "random", "memory_score")), interval_text(o.get("memory_score_ci95")),
                     *(_fmt(o[k]) for k in ("write", "read", "utilization", "factual_recall")), stages])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
    lines = [" | ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)) for row in [head, *rows]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def plot(results: Sequence[dict[str, Any]], folder: Path) -> list[Path]:
    """memory_score.png (per period, one line per run) and failures.png (stacked write/read/util)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    names = [f"{run_label(r)} ({r['mode']})" for r in results]
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in zip(names, results, strict=True):
        ys = [np.nan if v is None else v for v in r["per_period"]["memory_score"]]
        ax.plot(range(len(ys)), ys, marker="o", label=name)
    periods = max((len(r["per_period"]["memory_score"]) for r in results), default=0)
    ax.set_xticks(range(periods))  # periods are whole numbers
    ax.set(xlabel="period", ylabel="memory score (1 = upper bound, 0 = random)", title="Memory score per period")
    ax.axhline(0, color="grey", lw=0.5)
    ax.axhline(1, color="grey", lw=0.5, ls=":")
    ax.legend(fontsize=8)
    score_png = folder / "memory_score.png"
    fig.tight_layout()
    fig.savefig(score_png, dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(results) + 2), 4))
    bottom = np.zeros(len(results))
    for kind, color in zip(metrics.FAILURES, ("#d62728", "#ff7f0e", "#1f77b4"), strict=True):
        vals = np.array([np.nan_to_num(r["overall"][kind] or 0.0) for r in results])  # None: no probes asked
        ax.bar(names, vals, bottom=bottom, label=kind, color=color)
        bottom += vals
    ax.set(ylabel="share of questions", title="Failures by cause (sum = 1 - accuracy)")
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.legend()
    fail_png = folder / "failures.png"
    fig.tight_layout()
    fig.savefig(fail_png, dpi=120)
    plt.close(fig)
    return [score_png, fail_png]


def notes(results: Sequence[dict[str, Any]]) -> str:
    lines = [f"note ({run_label(r)}): {r['policy_note']}" for r in results if r.get("policy_note")]
    for r in results:
        o = r["overall"]
        if o.get("memory_score_cells_low_headroom"):
            lines.append(f"note ({run_label(r)}): {o['memory_score_cells_low_headroom']} user-period cells have an upper "
                         f"bound within {o['min_headroom']:.2f} of random; their memory score is undefined, not scored "
                         f"(the score averages {o['memory_score_cells']} cells)")
    if results:
        lines.append("n: questions behind each accuracy; 95% CI: Wilson for accuracy, bootstrap over questions for the "
                     "memory score (upper bound and random held fixed)")
    return ("\n\n" + "\n".join(lines)) if lines else ""


def write_report(results: dict[str, Any], run: Path) -> None:
    write_json(run / RESULTS_FILE, results)
    (run / "report.txt").write_text(table([results]) + notes([results]) + "\n", encoding="utf-8")
    plot([results], run / "plots")


def load_results(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / RESULTS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no results (run `memgym evaluate --out {folder}` first)")
    return read_json(path)  # depth- and size-guarded; a ValueError naming the file


def ranks(results: Sequence[dict[str, Any]], mode: str) -> dict[str, int]:
    """Rank (1 = best memory score) of each assistant among the runs of one mode."""
    runs = [r for r in results if r["mode"] == mode and r["overall"]["memory_score"] is not None]
    order = sorted(runs, key=lambda r: -np.nan_to_num(r["overall"]["memory_score"], nan=-np.inf))
    return {r["assistant"]: i for i, r in enumerate(order, 1)}


def compare(folders: Sequence[str | Path], plots: Path | None = None) -> str:
    """The table of several runs, and on-policy versus off-policy ranks when both modes are present."""
    results = [load_results(f) for f in folders]
    text = table(results) + notes(results)
    on, off = ranks(results, "on-policy"), ranks(results, "off-policy")
    if on and off:
        both = [a for a in on if a in off]
        text += "\n\nrank by memory score (1 = best)\nassistant | on-policy | off-policy\n"
        text += "\n".join(f"{a} | {on[a]} | {off[a]}" for a in both)
    if plots is not None:
        plot(results, plots)
    return text
