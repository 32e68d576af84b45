"""The statistics MemGym reports: bootstrap intervals, paired differences, Wilson intervals.

- ``bootstrap_ci(values)``: percentile bootstrap of a mean (the ladder's held-out reward over
  sessions, a memory score over cells, a train reward over steps), with Python's ``random``;
- ``paired_difference(a, b)``: the mean of ``b - a`` over the keys both hold (sessions, steps),
  with its ``bootstrap_ci``: pairing removes the spread between sessions both share;
- ``against_zero(ci)``: how an interval of a difference reads ("above", "below", "zero inside");
  ``separated(a, b)``: whether interval ``b`` lies wholly above ``a``;
- ``grouped_bootstrap_ci(groups, ...)``: percentile bootstrap of a mean over groups of each
  group's rescaled mean, every group resampled on its own, with numpy (the interactive memory score);
- ``wilson(k, n)``: the Wilson interval of a share;
- ``pooled_mean(by_seed)`` and ``pooled_paired_difference(a_by_seed, b_by_seed)``: a mean, and a
  paired difference, over (seed, session) cells, each bootstrap replicate resampling seeds and
  sessions both, so the interval holds the spread between seeds as well as between sessions.

Every bootstrap is deterministic for its seed (0 by default), so a report rerun gives the same
intervals.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np


def bootstrap_ci(values: Sequence[float | None], level: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> list[float] | None:
    """[low, high] of the mean of ``values`` (None and NaN left out) by the percentile bootstrap.

    Deterministic for a seed. None when nothing is left; a single value gives [v, v]."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return None
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(xs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    lo = means[max(0, math.floor(tail * resamples))]
    hi = means[min(resamples - 1, math.ceil((1.0 - tail) * resamples) - 1)]
    return [round(lo, 4), round(hi, 4)]


def paired_difference(a: Mapping[Hashable, float], b: Mapping[Hashable, float],
                      keys: Iterable[Hashable] | None = None) -> dict[str, Any] | None:
    """``{"mean", "ci", "n"}`` of ``b[k] - a[k]`` over ``keys`` (default: the keys both hold,
    sorted; their order fixes which values the bootstrap draws), the mean rounded to 4 places and
    ``ci`` its ``bootstrap_ci``. None when there is no key."""
    keys = sorted(a.keys() & b.keys()) if keys is None else list(keys)
    if not keys:
        return None
    diffs = [b[k] - a[k] for k in keys]
    return {"mean": round(sum(diffs) / len(diffs), 4), "ci": bootstrap_ci(diffs), "n": len(keys)}


def against_zero(ci: Sequence[float]) -> str:
    """Where a difference's interval stands against zero: "above", "below" or "zero inside"."""
    return "above" if ci[0] > 0 else "below" if ci[1] < 0 else "zero inside"


def separated(a: Sequence[float] | None, b: Sequence[float] | None) -> bool:
    """Whether interval ``b`` lies wholly above interval ``a`` (the ladder's "beats" criterion)."""
    return bool(a and b and b[0] > a[1])


def grouped_bootstrap_ci(groups: Sequence[Sequence[float]], offsets: Sequence[float], scales: Sequence[float],
                         draws: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval of the mean over groups of ``(mean(group) - offset) / scale``:
    each group's values are resampled with replacement (``draws`` times, one numpy generator for
    all, group after group), its offset and scale held fixed. None without groups."""
    if not groups:
        return None
    rng = np.random.default_rng(seed)
    means = np.zeros(draws)
    for values, offset, scale in zip(groups, offsets, scales, strict=True):
        values = np.asarray(values, dtype=float)
        means += (rng.choice(values, size=(draws, len(values))).mean(axis=1) - offset) / scale
    means /= len(groups)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """95% Wilson interval of a share ``k`` of ``n``, clipped to [0, 1] (None when n = 0)."""
    if n <= 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


SeedSessions = Mapping[Hashable, Mapping[Hashable, float | None]]  # seed -> {session: value}


def _sorted(keys) -> list:
    """Keys in their natural order (seeds 2 before 10), by their text where they do not compare."""
    try:
        return sorted(keys)
    except TypeError:
        return sorted(keys, key=str)


def _common_sessions(*by_seed: SeedSessions) -> list:
    """The sessions every seed of every side holds a value for, sorted (their order fixes the draws)."""
    sides = [values for side in by_seed for values in side.values()]
    keys = set.intersection(*({k for k, v in values.items() if v is not None} for values in sides)) if sides else set()
    return _sorted(keys)


def _two_level_ci(cells: np.ndarray, resamples: int, seed: int, level: float = 0.95) -> list[float]:
    """Percentile interval of the mean of ``cells`` (seeds x sessions) when each replicate draws seeds and
    sessions with replacement, independently: the replicate's mean over the drawn cells is ``w @ cells @ v``
    with ``w`` and ``v`` the seeds' and sessions' draw counts, as shares."""
    rng = np.random.default_rng(seed)
    n_seeds, n_sessions = cells.shape
    w = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=resamples) / n_seeds
    v = rng.multinomial(n_sessions, np.full(n_sessions, 1.0 / n_sessions), size=resamples) / n_sessions
    means = np.einsum("rs,sk,rk->r", w, cells, v)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return [round(float(lo), 4), round(float(hi), 4)]


def _pooled(cells: np.ndarray, seeds: list, sessions: list, resamples: int, seed: int) -> dict[str, Any]:
    return {"mean": round(float(cells.mean()), 4), "ci": _two_level_ci(cells, resamples, seed),
            "n_seeds": len(seeds), "n_sessions": len(sessions), "seeds": seeds}


def pooled_mean(by_seed: SeedSessions, resamples: int = 2000, seed: int = 0) -> dict[str, Any] | None:
    """``{"mean", "ci", "n_seeds", "n_sessions", "seeds"}`` of the values of ``by_seed`` (seed -> {session:
    value}) over the sessions every seed holds, the interval resampling seeds and sessions (one seed: a
    session bootstrap). None without a seed or a common session."""
    sessions = _common_sessions(by_seed)
    if not sessions:
        return None
    seeds = _sorted(by_seed)
    cells = np.array([[float(by_seed[s][k]) for k in sessions] for s in seeds])
    return _pooled(cells, seeds, sessions, resamples, seed)


def pair_seeds(a_by_seed: SeedSessions, b_by_seed: SeedSessions) -> list[tuple[Hashable, Hashable]]:
    """(seed of a, seed of b) pairs: a side run once (SFT) stands beside every seed of the other; with several
    seeds on both sides, the seeds both have."""
    if len(a_by_seed) == 1:
        (only,) = a_by_seed
        return [(only, s) for s in _sorted(b_by_seed)]
    if len(b_by_seed) == 1:
        (only,) = b_by_seed
        return [(s, only) for s in _sorted(a_by_seed)]
    return [(s, s) for s in _sorted(a_by_seed.keys() & b_by_seed.keys())]


def pooled_paired_difference(a_by_seed: SeedSessions, b_by_seed: SeedSessions, resamples: int = 2000,
                             seed: int = 0) -> dict[str, Any] | None:
    """``{"mean", "ci", "n_seeds", "n_sessions", "seeds"}`` of ``b - a`` over (seed, session) cells, paired by
    seed (``pair_seeds``) and by session (those common to all), the interval resampling seeds and sessions;
    ``seeds`` names the paired seeds by the side that has several (else by ``b``'s). None when nothing pairs."""
    pairs = pair_seeds(a_by_seed, b_by_seed)
    if not pairs:
        return None
    sessions = _common_sessions({s: a_by_seed[s] for s, _ in pairs}, {s: b_by_seed[s] for _, s in pairs})
    if not sessions:
        return None
    cells = np.array([[float(b_by_seed[sb][k]) - float(a_by_seed[sa][k]) for k in sessions] for sa, sb in pairs])
    seeds = [sa if len(b_by_seed) == 1 and len(a_by_seed) > 1 else sb for sa, sb in pairs]
    return _pooled(cells, seeds, sessions, resamples, seed)
