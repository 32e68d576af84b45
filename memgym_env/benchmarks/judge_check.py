"""A control test of the judge, run beside every evaluation: can it tell right from wrong here?

Judge accuracy is only as good as the judge. Before trusting it, each run grades answers whose
truth we know, built from the run's own questions: an item's gold answer given back as the
response (the judge should say correct) and the gold answer of a different question given as
the response (the judge should say wrong). Items without a usable gold answer (LoCoMo category
5, LongMemEval abstention) are left out. The result goes into ``run.json`` and the report; a
judge that agrees with the truth on fewer than ``TRUST`` of the controls is flagged, because
its accuracy column then says more about the judge than about the memory system (token F1 and
the retrieval metrics do not depend on it).

A judge scored by log-probability also gets a calibrated threshold: the margin
log p(correct) - log p(wrong) that best separates the controls. ``--judge-mode calibrated``
judges every answer with that cut instead of 0; the controls are then in-sample, so the report
gives the agreement it reaches as a fit, not as a held-out estimate.
"""

from __future__ import annotations

from typing import Any

from memgym_env.conversation import QAItem

from .judges import is_local, judge_batch, judge_margins

TRUST = 0.8  # below this agreement on the controls, the report warns against reading judge accuracy
PER_SIDE = 10  # controls of each kind (gold given back, another question's gold)


def _usable(item: QAItem) -> bool:
    return bool(item.answer and str(item.answer).strip()) and not item.meta.get("abstention")


def control_pairs(items: list[QAItem], per_side: int = PER_SIDE) -> list[tuple[QAItem, str, bool]]:
    """(item, response, response is right) for up to ``per_side`` items of each kind, in a fixed
    order so reruns grade the same controls. Only the first ``2 * per_side`` usable items are
    drawn on, so a larger ``--limit`` keeps the controls (and a calibrated threshold) as they were."""
    usable = [it for it in items if _usable(it)][: 2 * per_side]
    pairs: list[tuple[QAItem, str, bool]] = [(it, str(it.answer), True) for it in usable[:per_side]]
    wrong: list[tuple[QAItem, str, bool]] = []
    for i, it in enumerate(usable):
        if len(wrong) >= per_side:
            break
        gold = str(it.answer).strip().lower()
        # The nearest later item whose gold differs: plausible in form, wrong in content.
        for other in usable[i + 1:] + usable[:i]:
            if str(other.answer).strip().lower() not in gold and gold not in str(other.answer).strip().lower():
                wrong.append((it, str(other.answer), False))
                break
    return pairs + wrong


def best_threshold(margins: list[float], truth: list[bool]) -> float:
    """The margin cut that agrees with the truth most often (ties: the cut nearest 0, i.e. the
    least correction of the judge's own preference). Candidates: midpoints between neighbours."""
    ms = sorted(set(margins))
    cuts = [0.0, ms[0] - 1.0, ms[-1] + 1.0] + [(a + b) / 2 for a, b in zip(ms, ms[1:])]

    def agreement(cut: float) -> int:
        return sum((m >= cut) == t for m, t in zip(margins, truth, strict=True))

    return max(cuts, key=lambda c: (agreement(c), -abs(c)))


def _stats(said: list[bool], truth: list[bool]) -> dict[str, Any]:
    right = [s for s, t in zip(said, truth, strict=True) if t]
    wrong = [s for s, t in zip(said, truth, strict=True) if not t]
    return {"agreement": sum(s == t for s, t in zip(said, truth, strict=True)) / len(truth),
            "accepts_wrong": sum(wrong) / len(wrong) if wrong else None,
            "rejects_gold": (len(right) - sum(right)) / len(right) if right else None}


def check_judge(judge, benchmark: str, items: list[QAItem], max_new_tokens: int, mode: str) -> dict[str, Any]:
    """Grade the controls; agreement overall, and how often the judge accepts a wrong answer
    or rejects the gold one. ``n`` is 0 when the items give no controls. A judge scored by
    log-probability also gets the calibrated ``threshold`` and its agreement (``calibrated``)."""
    pairs = control_pairs(items)
    if not pairs:
        return {"n": 0, "controls": [], "agreement": None, "accepts_wrong": None, "rejects_gold": None,
                "trusted": None, "threshold": None}
    truth = [p[2] for p in pairs]
    out: dict[str, Any] = {"n": len(pairs), "controls": [p[0].id for p in pairs]}
    by_margin = mode in ("logprob", "calibrated") or (mode == "auto" and is_local(judge))
    if by_margin:
        margins = judge_margins(judge, benchmark, [p[0] for p in pairs], [p[1] for p in pairs])
        cut = best_threshold(margins, truth)
        plain = _stats([m >= 0.0 for m in margins], truth)
        calibrated = _stats([m >= cut for m in margins], truth)
        out |= {"margins": [round(m, 4) for m in margins], "threshold": cut, "calibrated": calibrated}
        # In calibrated mode the run judges with the threshold, so that is the judge being checked.
        out |= calibrated if mode == "calibrated" else plain
    else:
        verdicts = judge_batch(judge, benchmark, [p[0] for p in pairs], [p[1] for p in pairs], max_new_tokens, mode)
        out |= _stats([bool(v.correct) for v in verdicts], truth) | {"threshold": None}
    out["trusted"] = out["agreement"] >= TRUST
    return out


def describe(check: dict[str, Any] | None) -> list[str]:
    """Report lines for a judge check."""
    if not check or not check.get("n"):
        return ["- judge check: no controls (no items with a gold answer)"]
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    line = (f"- judge check: on {check['n']} control answers (gold answers given back, and other questions' "
            f"gold answers) the judge agreed with the truth on {pct(check['agreement'])}; it accepted "
            f"{pct(check['accepts_wrong'])} of the wrong ones and rejected {pct(check['rejects_gold'])} of the right ones")
    out = [line]
    cal = check.get("calibrated")
    if cal and check.get("threshold") not in (None, 0.0):
        out.append(f"- judge calibration: \"correct\" needs a log-probability margin of at least "
                   f"{check['threshold']:.3f}; at that cut the judge agrees with the controls on "
                   f"{pct(cal['agreement'])} (`--judge-mode calibrated` judges with it)")
    if not check["trusted"]:
        out.append(f"- **warning**: the judge agrees with the truth on fewer than {TRUST:.0%} of the controls, so "
                   "its accuracy column here measures the judge more than the memory; use a stronger `--judge` "
                   "(token F1 and the retrieval columns do not depend on it)")
    return out
