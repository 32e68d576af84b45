"""Percentile bootstrap intervals for the ladder's held-out means (resampling sessions or cells)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence


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


def separated(a: Sequence[float] | None, b: Sequence[float] | None) -> bool:
    """Whether interval ``b`` lies wholly above interval ``a`` (the ladder's "beats" criterion)."""
    return bool(a and b and b[0] > a[1])
