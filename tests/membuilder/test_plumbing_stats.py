"""membuilder.plumbing.stats: the intervals MemGym's reports print, on the ladder's committed results."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from membuilder.plumbing.stats import (
    against_zero,
    bootstrap_ci,
    grouped_bootstrap_ci,
    paired_difference,
    separated,
    wilson,
)

LADDER = json.loads((Path(__file__).resolve().parents[2] / "results" / "ladder.json").read_text(encoding="utf-8"))


def _row(stage: str, seed: int = 0) -> dict:
    return next(r for r in LADDER if r["stage"] == stage and r["seed"] == seed)


def test_bootstrap_ci_gives_the_committed_interval_of_a_stage():
    sft = _row("sft")
    assert bootstrap_ci(list(sft["session_reward_evidence"].values())) == sft["reward_evidence_ci"] == [0.4484, 0.6031]


def test_bootstrap_ci_is_deterministic_for_a_seed_and_skips_missing_values():
    xs = [0.0, 0.5, 1.0, None, math.nan, 0.25]
    assert bootstrap_ci(xs) == bootstrap_ci([0.0, 0.5, 1.0, 0.25])
    assert bootstrap_ci(xs, seed=1) != bootstrap_ci(xs)
    assert bootstrap_ci([None, math.nan]) is None and bootstrap_ci([0.5]) == [0.5, 0.5]


def test_paired_difference_gives_the_committed_line_of_the_ladder_report():
    # results/ladder.md: "ADRPO (alpha 4) seed 0 above SFT: ...; paired over the same 96 sessions:
    # +0.027 [0.005, 0.056] (above)"
    d = paired_difference(_row("sft")["session_reward_evidence"], _row("adrpo")["session_reward_evidence"])
    assert (f"{d['mean']:+.3f}", d["ci"], d["n"], against_zero(d["ci"])) == ("+0.027", [0.0052, 0.0562], 96, "above")
    # "... not told apart from GRPO (alpha 1) ...; paired over the same 96 sessions: -0.013 [-0.048, 0.018] (zero
    # inside the interval)"
    d = paired_difference(_row("grpo")["session_reward_evidence"], _row("adrpo")["session_reward_evidence"])
    assert f"{d['mean']:+.3f} [{d['ci'][0]:.3f}, {d['ci'][1]:.3f}] ({against_zero(d['ci'])})" == "-0.013 [-0.048, 0.018] (zero inside)"


def test_paired_difference_pairs_the_shared_keys_or_the_keys_given_in_their_order():
    a, b = {"s1": 0.5, "s2": 0.25, "s3": 1.0}, {"s2": 0.75, "s1": 0.5, "s4": 0.0}
    assert paired_difference(a, b) == {"mean": 0.25, "ci": [0.0, 0.5], "n": 2}
    assert paired_difference(a, b, ["s2"]) == {"mean": 0.5, "ci": [0.5, 0.5], "n": 1}
    assert paired_difference(a, {"s9": 1.0}) is None


def test_an_interval_reads_against_zero_and_against_another():
    assert [against_zero(ci) for ci in ([0.01, 0.2], [-0.2, -0.01], [-0.1, 0.1], [0.0, 0.1])] == [
        "above", "below", "zero inside", "zero inside"]
    assert separated([0.1, 0.2], [0.21, 0.3]) and not separated([0.1, 0.2], [0.2, 0.3])
    assert not separated(None, [0.2, 0.3])


def test_grouped_bootstrap_ci_rescales_each_group_and_holds_a_constant_one_fixed():
    assert grouped_bootstrap_ci([[1.0, 1.0], [0.5, 0.5, 0.5]], [0.25, 0.25], [0.5, 0.25]) == (1.25, 1.25)
    assert grouped_bootstrap_ci([], [], []) is None


def test_grouped_bootstrap_ci_narrows_with_more_values_and_repeats_for_a_seed():
    few, many = [[1.0, 0.0, 1.0, 1.0]], [[1.0, 0.0, 1.0, 1.0] * 25]
    lo, hi = grouped_bootstrap_ci(few, [0.25], [0.75])
    lo2, hi2 = grouped_bootstrap_ci(many, [0.25], [0.75])
    assert lo < 2 / 3 < hi and lo2 < 2 / 3 < hi2 and hi2 - lo2 < hi - lo
    assert grouped_bootstrap_ci(many, [0.25], [0.75]) == (lo2, hi2) != grouped_bootstrap_ci(many, [0.25], [0.75], seed=1)


def test_wilson_interval_by_hand_and_at_the_edges():
    lo, hi = wilson(8, 16)
    z = 1.96
    half = z * np.sqrt(0.25 / 16 + z * z / (4 * 16 * 16)) / (1 + z * z / 16)
    assert (lo, hi) == (0.5 - half, 0.5 + half)
    assert wilson(0, 0) is None and wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0
