"""Scores of the interactive evaluation (AMemGym, protocols §4), as plain array formulas.

Shapes: ``[users, periods]`` for per-period scores, NaN where a user has no such period.

* accuracy S: share of a period's questions answered correctly.
* random S_random: mean of 1/(number of choices) over the period's questions (about 0.231 in
  AMemGym's base world).
* upper bound S_UB: accuracy of the same model shown only the current values of each question's
  ``required_info`` (AMemGym's ``eval/upperbound.py``; ``checks.upper_bound``).
* memory score per user and period: (S - S_random) / (S_UB - S_random); undefined (NaN, left
  out of the average, counted as a low-headroom cell) when S_UB - S_random < ``MIN_HEADROOM`` (0.2):
  an upper bound near chance leaves too little to normalise by (a cell where both
  equal 0.25 would otherwise score any lucky answer as far above the upper bound).
* uncertainty: ``wilson`` gives a 95% interval of an accuracy from its question count;
  ``score_interval`` a 95% bootstrap interval of the mean memory score over the questions
  (upper bound and random held fixed); both from ``membuilder.plumbing.stats``.
* diagnosis: each wrong answer gets exactly one label (``failure_label``), so over the same
  questions write + read + utilization = 1 - accuracy.
* factual recall: share of a period's new state facts that the memory supports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from membuilder.agents.choice import states_verbatim  # noqa: F401  (the verbatim test, shared with probes)
from membuilder.plumbing.stats import grouped_bootstrap_ci, wilson  # noqa: F401  (wilson: the results' accuracy interval)

LABELS = ("success", "write", "read", "utilization")
FAILURES = LABELS[1:]


def accuracy(correct: Sequence[Sequence[Sequence[bool]]]) -> np.ndarray:
    """``correct[u][p][q]`` -> ``[U, P]`` share correct (NaN for a missing period)."""
    return _per_period(correct, lambda qs: float(np.mean(qs)) if len(qs) else np.nan)


def random_baseline(n_choices: Sequence[Sequence[Sequence[int]]]) -> np.ndarray:
    """``n_choices[u][p][q]`` -> ``[U, P]`` expected accuracy of uniform guessing."""
    return _per_period(n_choices, lambda ns: float(np.mean([1.0 / n for n in ns])) if len(ns) else np.nan)


def _per_period(values, fn) -> np.ndarray:
    periods = max((len(v) for v in values), default=0)
    out = np.full((len(values), periods), np.nan)
    for u, per_user in enumerate(values):
        for p, qs in enumerate(per_user):
            out[u, p] = fn(list(qs))
    return out


# Least S_UB - S_random for a memory score to be defined. A cell with 16 questions and headroom 0.15
# moves by 0.42 per question (0.67 at 10 questions), so its score says more about one answer than about
# the memory; at 0.2 one question of 16 moves it by at most 0.31.
MIN_HEADROOM = 0.2


def low_headroom(upper: np.ndarray, rand: np.ndarray, min_headroom: float = MIN_HEADROOM) -> np.ndarray:
    """Cells whose upper bound is within ``min_headroom`` of random (False where either is NaN)."""
    upper, rand = np.asarray(upper, dtype=float), np.asarray(rand, dtype=float)
    with np.errstate(invalid="ignore"):
        return ~np.isnan(upper) & ~np.isnan(rand) & (upper - rand < min_headroom)


def memory_score(acc: np.ndarray, upper: np.ndarray, rand: np.ndarray, min_headroom: float = MIN_HEADROOM) -> np.ndarray:
    """Normalised score per cell; NaN where ``upper - rand < min_headroom`` (no room above chance)."""
    acc, upper, rand = (np.asarray(x, dtype=float) for x in (acc, upper, rand))
    denom = upper - rand
    with np.errstate(invalid="ignore"):
        ok = denom >= min_headroom
    out = np.full(acc.shape, np.nan)
    np.divide(acc - rand, denom, out=out, where=ok)
    return out


def score_interval(correct: Sequence[Sequence[Sequence[bool]]], upper: np.ndarray, rand: np.ndarray,
                   draws: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval of the mean memory score: each cell's questions are
    resampled with replacement, its upper bound and random baseline held fixed. None when no cell
    has a defined score."""
    score = memory_score(accuracy(correct), upper, rand)
    cells = [(u, p) for u, per_user in enumerate(correct) for p, qs in enumerate(per_user)
             if len(qs) and not np.isnan(score[u, p])]
    return grouped_bootstrap_ci([correct[u][p] for u, p in cells], [float(rand[u, p]) for u, p in cells],
                                [float(upper[u, p] - rand[u, p]) for u, p in cells], draws=draws, seed=seed)


def nanmean(x: Any) -> float:
    """Mean over the defined cells; NaN (without a warning) when none is defined."""
    x = np.asarray(x, dtype=float)
    return float(np.nanmean(x)) if np.any(~np.isnan(x)) else float("nan")


def last_written(states: Sequence[Mapping[str, str]], period: int, variable: str) -> int:
    """The latest period <= ``period`` in which ``variable`` took its value at ``period``."""
    p = period
    while p > 0 and states[p - 1].get(variable) == states[period].get(variable):
        p -= 1
    return p


def failure_label(correct: bool, required: Sequence[str], recalled_now: Mapping[str, bool],
                  recalled_at_write: Mapping[str, bool]) -> str:
    """One label per answer: success; utilization if every required variable is recalled now;
    otherwise write if some variable missing now was not recalled when last written (write wins a
    tie), else read (recalled when written, lost since)."""
    if correct:
        return "success"
    missing = [v for v in required if not recalled_now.get(v, False)]
    if not missing:
        return "utilization"
    return "write" if any(not recalled_at_write.get(v, False) for v in missing) else "read"


def diagnose_user(states: Sequence[Mapping[str, str]], correct: Sequence[Sequence[bool]],
                  required: Sequence[Sequence[str]], recalled: Sequence[Mapping[str, bool]]) -> list[list[str]]:
    """Labels ``[p][q]`` for one user: ``correct[p][q]``, ``required[q]`` variables of question q,
    ``recalled[p][var]`` from the probes at period p, ``states[p]`` the true state at period p."""
    labels = []
    for p, per_q in enumerate(correct):
        row = []
        for q, ok in enumerate(per_q):
            at_write = {v: recalled[last_written(states, p, v)].get(v, False) for v in required[q]}
            row.append(failure_label(ok, required[q], recalled[p], at_write))
        labels.append(row)
    return labels


def diagnosis_rates(labels: Sequence[Sequence[Sequence[str]]]) -> dict[str, np.ndarray]:
    """``labels[u][p][q]`` -> per period (pooled over users) the share of each label; the three
    failure rates add up to 1 - accuracy of the same questions."""
    periods = max((len(u) for u in labels), default=0)
    out = {k: np.full(periods, np.nan) for k in LABELS}
    for p in range(periods):
        pooled = [lab for u in labels if p < len(u) for lab in u[p]]
        if pooled:
            for k in LABELS:
                out[k][p] = pooled.count(k) / len(pooled)
    return out


def overall_rates(labels: Sequence[Sequence[Sequence[str]]]) -> dict[str, float]:
    pooled = [lab for u in labels for per_p in u for lab in per_p]
    return {k: (pooled.count(k) / len(pooled) if pooled else float("nan")) for k in LABELS}


def new_facts(states: Sequence[Mapping[str, str]], period: int) -> dict[str, str]:
    """Variables whose value is new at ``period`` (all of them at period 0)."""
    if period == 0:
        return dict(states[0])
    return {v: x for v, x in states[period].items() if states[period - 1].get(v) != x}


def factual_recall(supported: Sequence[bool]) -> float:
    return float(np.mean(supported)) if len(supported) else float("nan")


_STOP = frozenset("the and for with from that this your you are was were has have had its into about than".split())


def content_tokens(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) >= 3 and w not in _STOP}


def evidence_supports(value_text: str, sessions: set[str], entries: Sequence[tuple[str, Sequence[str]]],
                      core: str, min_share: float = 0.5) -> bool:
    """MemBuilder's bank by evidence matching: an entry written from (or merging) one of the
    ``sessions`` that revealed the fact, or the Core block, holds at least ``min_share`` of the
    value's content words. ``entries`` are (text, source session ids)."""
    want = content_tokens(value_text)
    if not want:
        return False

    def holds(text: str) -> bool:
        return len(want & content_tokens(text)) >= min_share * len(want)

    return holds(core) or any(holds(t) for t, srcs in entries if sessions & set(srcs))
