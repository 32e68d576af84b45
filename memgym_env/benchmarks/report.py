"""Aggregate per-item results into the numbers a benchmark publishes, and render them.

- LoCoMo: per category (the file's numbering, printed with its names in every report) judge
  accuracy "J" and token F1; the headline is categories 1-4 together; category 5 (adversarial)
  is reported apart.
- LongMemEval: accuracy per question type, overall, task-averaged (mean of the per-type
  accuracies) and on the abstention (``_abs``) questions.
- PerLTQA: per memory kind, judge accuracy, retrieval recall@k and anchor coverage; and the
  memory classification (which kind a question needs): precision/recall/F1 per kind, macro
  and weighted F1.

An item whose judge verdict could not be parsed counts as wrong; the count is shown.

A judge that failed its control check (``judge_check``: known-right and known-wrong answers)
is not reported as a result: its accuracy column moves behind the judge-free columns (token F1,
recall@k, evidence retrieved) and is marked untrusted, and the failure split it drives is shown
as untrusted beside the judge-free split (was the evidence written, was it retrieved).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from .locomo import HEADLINE_CATEGORIES, LOCOMO_CATEGORIES
from .longmemeval import LONGMEMEVAL_TYPES
from .memory_classification import classification_scores

Record = dict[str, Any]


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _group(records: list[Record]) -> dict[str, Any]:
    """count, judge accuracy (None verdict = wrong), and the mean of every optional metric."""
    out: dict[str, Any] = {
        "count": len(records),
        "judged": sum(1 for r in records if "correct" in r),
        "accuracy": _mean([1.0 if r.get("correct") else 0.0 for r in records if "correct" in r]),
        "unparsed_verdicts": sum(1 for r in records if "correct" in r and r["correct"] is None),
    }
    for metric in ("f1", "recall_at_k", "anchor_coverage", "anchor_coverage_context", "evidence_retrieved"):
        vals = [float(r[metric]) for r in records if r.get(metric) is not None]
        if vals:
            out[metric] = sum(vals) / len(vals)
    diag = [r["diagnosis"] for r in records if r.get("diagnosis")]
    if diag:
        out["diagnosis"] = {k: diag.count(k) / len(records) for k in ("correct", "write", "read", "answer")}
    levels = [r["recall_level"] for r in records if r.get("recall_level")]
    if levels:
        out["recall_session_level"] = levels.count("session")
    located = [r for r in records if r.get("written") is not None]
    if located:  # needs no judge: was the evidence written to memory, and was it retrieved?
        out["evidence_split"] = {
            "not_written": sum(not r["written"] for r in located) / len(located),
            "not_retrieved": sum(bool(r["written"]) and not r.get("evidence_retrieved") for r in located) / len(located),
            "retrieved": sum(bool(r["written"]) and bool(r.get("evidence_retrieved")) for r in located) / len(located)}
    return out


def judge_trusted(summary: dict[str, Any]) -> bool:
    """False only when the run's judge check ran and the judge failed it."""
    return (summary.get("judge_check") or {}).get("trusted") is not False


def summarize(benchmark: str, records: list[Record], judge_check: dict[str, Any] | None = None) -> dict[str, Any]:
    """The benchmark's numbers; ``judge_check`` (the run's, see ``judge_check.check_judge``) is kept
    in the summary so every rendering knows whether the judge columns are results."""
    out = _summarize(benchmark, records)
    if judge_check and judge_check.get("n"):
        out["judge_check"] = {k: judge_check.get(k) for k in ("n", "agreement", "accepts_wrong", "rejects_gold",
                                                               "trusted")}
    return out


def _summarize(benchmark: str, records: list[Record]) -> dict[str, Any]:
    by_cat: dict[Any, list[Record]] = defaultdict(list)
    for r in records:
        by_cat[r["category"]].append(r)
    if benchmark == "locomo":
        cats = {str(c): {"name": LOCOMO_CATEGORIES[c], **_group(by_cat[c])} for c in sorted(by_cat)}
        return {
            "benchmark": benchmark,
            "category_mapping": {str(k): v for k, v in LOCOMO_CATEGORIES.items()},
            "headline": {"categories": list(HEADLINE_CATEGORIES),
                         **_group([r for r in records if r["category"] in HEADLINE_CATEGORIES])},
            "adversarial": _group(by_cat[5]) if 5 in by_cat else None,
            "categories": cats,
        }
    if benchmark == "longmemeval":
        types = {t: _group(by_cat[t]) for t in LONGMEMEVAL_TYPES if t in by_cat}
        accs = [g["accuracy"] for g in types.values() if g["accuracy"] is not None]
        return {
            "benchmark": benchmark,
            "overall": _group(records),
            "task_averaged_accuracy": sum(accs) / len(accs) if accs else None,
            "abstention": _group([r for r in records if r.get("abstention")]),
            "categories": types,
        }
    if benchmark == "perltqa":
        classified = [r for r in records if r.get("memory_kind_predicted")]
        return {"benchmark": benchmark, "overall": _group(records),
                "categories": {str(c): _group(v) for c, v in sorted(by_cat.items(), key=lambda kv: str(kv[0]))},
                "memory_classification": classification_scores([r["category"] for r in classified],
                                                               [r["memory_kind_predicted"] for r in classified])
                if classified else None}
    raise ValueError(f"unknown benchmark {benchmark!r}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def table_rows(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-category table (also the headline lines)."""
    metrics = [m for m in ("f1", "recall_at_k", "anchor_coverage", "evidence_retrieved")
               if any(m in g for g in summary["categories"].values())]
    if judge_trusted(summary):
        header = ["category", "n", "judge acc %", *[f"{m} %" for m in metrics], "unparsed"]

        def row(label: str, g: dict[str, Any]) -> list[str]:
            return [label, str(g["count"]), _pct(g["accuracy"]), *[_pct(g.get(m)) for m in metrics],
                    str(g["unparsed_verdicts"])]
    else:  # the judge failed its check: the judge-free columns lead, the judge's accuracy is bracketed
        header = ["category", "n", *[f"{m} %" for m in metrics], "judge acc % (untrusted)", "unparsed"]

        def row(label: str, g: dict[str, Any]) -> list[str]:
            acc = "-" if g["accuracy"] is None else f"({_pct(g['accuracy'])})"
            return [label, str(g["count"]), *[_pct(g.get(m)) for m in metrics], acc, str(g["unparsed_verdicts"])]

    rows = []
    for key, g in summary["categories"].items():
        label = f"{key} {g['name']}" if "name" in g else key
        rows.append(row(label, g))
    if summary["benchmark"] == "locomo":
        rows.append(row("headline (1-4)", summary["headline"]))
        if summary["adversarial"]:
            rows.append(row("5 adversarial (apart)", summary["adversarial"]))
    else:
        rows.append(row("overall", summary["overall"]))
        if summary["benchmark"] == "longmemeval":
            rows.append(row("abstention (_abs)", summary["abstention"]))
            avg = _pct(summary["task_averaged_accuracy"])
            at = header.index("judge acc %" if judge_trusted(summary) else "judge acc % (untrusted)")
            cells = ["task-averaged", "", *[""] * (len(header) - 2)]
            cells[at] = avg if judge_trusted(summary) else f"({avg})"
            rows.append(cells)
    return header, rows


def markdown(summary: dict[str, Any], run: dict[str, Any] | None = None) -> str:
    header, rows = table_rows(summary)
    lines = [f"# {summary['benchmark']} results", ""]
    if run:
        for key in ("system", "model", "answerer", "judge", "judge_prompt", "embedder", "data", "seed"):
            if run.get(key) is not None:
                lines.append(f"- {key}: `{run[key]}`")
        lines.append("")
    if summary["benchmark"] == "locomo":
        mapping = ", ".join(f"{k} = {v}" for k, v in summary["category_mapping"].items())
        lines += [f"Category numbers as in `locomo10.json`: {mapping}. Headline = categories 1-4; "
                  "category 5 is reported apart.", ""]
        if run and str(run.get("judge_prompt", "")).startswith("locomo-strict"):
            lines += ["Judged with our strict prompt (`--judge-prompt strict`): not comparable with published J "
                      "scores, which use the generous criteria (same topic counts, dates in any format).", ""]
        lines += ["Published LoCoMo J scores to compare with: MemBuilder's 84.23 may count category 5 items, whose "
                  "gold answers are empty in `locomo10.json`; this headline leaves them out.", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    scope = summary.get("overall", summary.get("headline", {}))
    diag, split = scope.get("diagnosis"), scope.get("evidence_split")
    if not judge_trusted(summary):
        lines += ["", untrusted_warning(summary)]
    if diag:
        split_text = ", ".join(f"{k} {_pct(v)}%" for k, v in diag.items())
        if judge_trusted(summary):
            lines += ["", "Where answers fail (share of items): " + split_text]
        else:
            lines += ["", "Where answers fail, by the untrusted judge's verdicts (not a result): " + split_text]
    if split:
        lines += ["", "Evidence of each question (share of items; needs no judge): "
                  + ", ".join(f"{k.replace('_', ' ')} {_pct(v)}%" for k, v in split.items())]
    if run and run.get("system") == "membuilder":
        lines += ["", recall_caveat(summary)]
    mc = summary.get("memory_classification")
    if mc:
        lines += ["", f"Memory classification (the answer model names the memory kind; n = {mc['count']}): "
                  f"accuracy {_pct(mc['accuracy'])}%, macro F1 {_pct(mc['macro_f1'])}%, "
                  f"weighted F1 {_pct(mc['weighted_f1'])}%", "",
                  "| kind | support | predicted | precision % | recall % | F1 % |", "|---|---|---|---|---|---|"]
        lines += [f"| {k} | {v['support']} | {v['predicted']} | {_pct(v['precision'])} | {_pct(v['recall'])} | "
                  f"{_pct(v['f1'])} |" for k, v in mc["per_kind"].items()]
    return "\n".join(lines) + "\n"


def recall_caveat(summary: dict[str, Any]) -> str:
    """What MemBuilder's recall_at_k counts: an entry keeps only its session, not the turn or memory id."""
    cats = summary["categories"]
    session = {k: g["recall_session_level"] for k, g in cats.items() if g.get("recall_session_level")}
    exact = [k for k, g in cats.items() if "recall_session_level" in g and not g["recall_session_level"]]
    tail = ("; evidence_retrieved asks whether a retrieved entry (or Core) carries the evidence's content.")
    if not session and exact:
        return "recall_at_k here is at memory-id level: each evidence session holds one memory" + tail
    where = (" for " + ", ".join(f"{k} ({n} questions)" for k, n in session.items())) if session else ""
    text = (f"recall_at_k here is session-level{where}: a MemBuilder entry keeps only the session it was written "
            "from, so it counts as holding every turn or memory id of that session")
    if exact:
        text += f"; for {', '.join(exact)} each evidence session is one memory, so recall there is at memory-id level"
    return text + tail


def untrusted_warning(summary: dict[str, Any]) -> str:
    jc = summary["judge_check"]
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    return (f"**The judge failed its check**: on {jc['n']} control answers it agreed with the truth on "
            f"{pct(jc['agreement'])}, accepting {pct(jc['accepts_wrong'])} of the known-wrong ones. Its accuracy and "
            "the failure split it drives are not results here; token F1, recall@k and evidence retrieved are. "
            "Use a stronger `--judge`.")


def print_table(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    header, rows = table_rows(summary)
    table = Table(title=f"{summary['benchmark']} results")
    for h in header:
        table.add_column(h, justify="left" if h == "category" else "right")
    for r in rows:
        table.add_row(*r)
    console = Console()
    if not judge_trusted(summary):
        console.print(untrusted_warning(summary).replace("**", ""))
    if summary["benchmark"] == "locomo":
        console.print("LoCoMo categories: " + ", ".join(f"{k} {v}" for k, v in summary["category_mapping"].items()))
    console.print(table)
    mc = summary.get("memory_classification")
    if mc:
        console.print(f"memory classification: accuracy {_pct(mc['accuracy'])}%, macro F1 {_pct(mc['macro_f1'])}%, "
                      f"weighted F1 {_pct(mc['weighted_f1'])}% (n = {mc['count']})")


def plot(summary: dict[str, Any], path: str | Path) -> Path:
    """Bar chart of judge accuracy (and F1 / recall where present) per category."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = summary["categories"]
    labels = [f"{k}\n{g['name']}" if "name" in g else k for k, g in cats.items()]
    judge = "judge acc" if judge_trusted(summary) else "judge acc (untrusted)"
    series = [(judge, [g["accuracy"] or 0.0 for g in cats.values()])]
    for metric in ("f1", "recall_at_k"):
        if any(metric in g for g in cats.values()):
            series.append((metric, [g.get(metric) or 0.0 for g in cats.values()]))
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(labels)), 3.6))
    width = 0.8 / len(series)
    for i, (name, vals) in enumerate(series):
        ax.bar([x + i * width for x in range(len(labels))], [100 * v for v in vals], width, label=name)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(labels))], labels, fontsize=8)
    ax.set_ylabel("%")
    ax.set_ylim(0, 100)
    ax.set_title(f"{summary['benchmark']}: per category (n = " + ", ".join(str(g["count"]) for g in cats.values()) + ")")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
