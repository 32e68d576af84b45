"""Stages pooled over seeds: the two-level bootstrap of membuilder.plumbing.stats and train.ladder.pooled."""

from __future__ import annotations

import random

import pytest

from membuilder.plumbing import stats
from train.ladder import pooled

KEYS = [f"u/p{i % 4}-s{i}" for i in range(40)]


def _sessions(seed: int, shift: float = 0.0) -> dict[str, float]:
    """Sessions that differ a lot from one another, the same ones for every seed, plus a little noise."""
    rng = random.Random(seed)
    return {k: (i % 3) * 0.4 + shift + rng.uniform(-0.02, 0.02) for i, k in enumerate(KEYS)}


def _width(ci) -> float:
    return ci[1] - ci[0]


def test_seeds_that_disagree_widen_the_interval_beyond_the_sessions_own():
    sft = {0: _sessions(100)}
    agree = {s: _sessions(s, 0.1) for s in range(3)}
    disagree = {0: _sessions(0, -0.1), 1: _sessions(1, 0.1), 2: _sessions(2, 0.3)}  # mean shift 0.1 as well
    a = stats.pooled_paired_difference(sft, agree)
    d = stats.pooled_paired_difference(sft, disagree)
    assert a["n_seeds"] == d["n_seeds"] == 3 and a["n_sessions"] == 40 and a["seeds"] == [0, 1, 2]
    assert a["mean"] == pytest.approx(0.1, abs=0.01) and d["mean"] == pytest.approx(0.1, abs=0.01)
    assert a["ci"][0] < a["mean"] < a["ci"][1] and d["ci"][0] < d["mean"] < d["ci"][1]
    # the session-only interval of the seeds' mean per session ignores how far apart the seeds are
    per_session_mean = {k: sum(disagree[s][k] for s in disagree) / 3 - sft[0][k] for k in KEYS}
    session_only = stats.bootstrap_ci(list(per_session_mean.values()))
    assert _width(d["ci"]) > 3 * _width(session_only)
    assert _width(d["ci"]) > 3 * _width(a["ci"])
    assert d == stats.pooled_paired_difference(sft, disagree)  # deterministic for its seed
    assert d["ci"] != stats.pooled_paired_difference(sft, disagree, seed=1)["ci"]


def test_one_seed_is_a_session_bootstrap_of_the_plain_paired_scale():
    a, b = _sessions(7), {k: v + random.Random(k).uniform(-0.3, 0.4) for k, v in _sessions(8).items()}
    plain = stats.paired_difference(a, b)
    one = stats.pooled_paired_difference({0: a}, {0: b})
    assert one["mean"] == plain["mean"] and one["n_seeds"] == 1 and one["n_sessions"] == plain["n"]
    assert _width(one["ci"]) == pytest.approx(_width(plain["ci"]), rel=0.2)  # two generators, one scale
    alone = stats.pooled_mean({3: b})
    assert alone["seeds"] == [3] and alone["mean"] == pytest.approx(sum(b.values()) / len(b), abs=1e-4)
    assert _width(alone["ci"]) == pytest.approx(_width(stats.bootstrap_ci(list(b.values()))), rel=0.2)


def test_seeds_pair_by_seed_and_a_stage_run_once_stands_beside_every_seed():
    rl = {0: {"a": 1.0, "b": 1.0}, 1: {"a": 0.0, "b": 0.0}, 2: {"a": 5.0, "b": 5.0}}
    other = {0: {"a": 0.5, "b": 0.5}, 1: {"a": 0.5, "b": 0.5, "c": 9.0}}
    assert stats.pair_seeds({7: {}}, rl) == [(7, 0), (7, 1), (7, 2)]
    assert stats.pair_seeds(rl, {7: {}}) == [(0, 7), (1, 7), (2, 7)]
    d = stats.pooled_paired_difference(other, rl)  # seeds 0 and 1 only; session "c" is not common
    assert d["seeds"] == [0, 1] and d["n_sessions"] == 2 and d["mean"] == 0.0
    assert stats.pooled_paired_difference({0: {"a": 0.0}}, rl)["mean"] == 2.0
    assert stats.pooled_paired_difference(rl, {0: {"a": 0.0}})["seeds"] == [0, 1, 2]
    assert stats.pooled_paired_difference({0: {"x": 1.0}}, rl) is None
    assert stats.pooled_paired_difference({5: {"a": 1.0}, 6: {"a": 1.0}}, rl) is None
    assert stats.pooled_mean({}) is None and stats.pooled_mean({0: {"a": None}}) is None
    assert stats.pooled_mean({2: {"a": 1.0}, 10: {"a": 3.0}})["seeds"] == [2, 10]  # seeds in their own order


def _row(stage, seed, shift, noop=0.05, alpha=None, attribution=None):
    per = {k: round(v + shift, 4) for k, v in _sessions(seed if stage not in ("base", "sft") else 50).items()}
    return {"stage": stage, "seed": seed, "alpha": alpha, "attribution": attribution, "reward_mode": "stale",
            "session_reward_evidence": per, "session_noop_evidence": {k: noop for k in KEYS}}


def _ladder():
    return [_row("base", 0, -0.4), _row("sft", 0, 0.0),
            *(_row("grpo", s, 0.1, alpha=1.0, attribution="evidence") for s in range(3)),
            *(_row("adrpo", s, -0.05 + 0.05 * s, alpha=4.0, attribution="evidence") for s in range(3)),
            _row("adrpo_retrieval", 0, 0.0, alpha=4.0, attribution="retrieval")]


def test_the_summary_pools_every_stage_and_reads_the_goals():
    s = pooled.summary(_ladder())
    assert list(s["stages"]) == ["base", "sft", "grpo", "adrpo", "adrpo_retrieval"]
    grpo = s["stages"]["grpo"]
    assert grpo["alpha"] == 1.0 and grpo["attribution"] == "evidence" and grpo["reward_mode"] == "stale"
    assert grpo["reward"]["seeds"] == [0, 1, 2] and grpo["gain"]["mean"] == pytest.approx(grpo["reward"]["mean"] - 0.05,
                                                                                            abs=1e-3)
    assert set(s["differences"]) == {name for name, _, _ in pooled.DIFFERENCES}
    assert s["differences"]["ADRPO-retrieval - SFT"]["seeds"] == [0]
    # a stage run on one seed stands beside every seed of the other, and the line says so
    retrieval = s["differences"]["ADRPO - ADRPO-retrieval"]
    assert retrieval["seeds_a"] == [0] and retrieval["seeds_b"] == [0, 1, 2] and retrieval["n_seeds"] == 3
    goals = {g["goal"]: g for g in s["goals"]}
    assert goals["SFT > base"]["verdict"] == "met" and goals["GRPO > SFT"]["verdict"] == "met"
    assert goals["ADRPO-evidence > SFT"]["verdict"] == "not met"  # seeds at -0.05, 0, +0.05
    published = goals["ADRPO-evidence vs GRPO (published order: alpha 4 above alpha 1)"]
    assert published["verdict"] == "the opposite of the published order" and published["reads"] == "below"
    lines = pooled.goal_lines(s)
    assert lines[0].startswith("SFT > base, pooled over seeds and sessions: met (SFT - base +0.400")
    assert "zero inside the interval" in lines[2]
    table = pooled.stage_table(s).splitlines()
    assert table[0].startswith("| stage | seeds |") and max(map(len, table)) <= 80
    assert "| adrpo_retrieval | 0 | 40 |" in table[-1]
    lines = pooled.difference_lines(s)
    assert "ADRPO - GRPO (adrpo seeds 0, 1, 2 against grpo seeds 0, 1, 2), over 40 sessions: -0.100" in lines[4]
    assert lines[5].startswith("ADRPO - ADRPO-retrieval (adrpo seeds 0, 1, 2 against adrpo_retrieval seed 0)")


def test_rows_from_before_the_new_fields_still_pool_their_reward():
    old = [{k: v for k, v in r.items() if k not in ("session_noop_evidence", "attribution", "reward_mode")}
           for r in _ladder() if r["stage"] in ("sft", "adrpo")]
    s = pooled.summary(old)
    assert s["stages"]["adrpo"]["gain"] is None and s["stages"]["adrpo"]["attribution"] is None
    assert list(s["differences"]) == ["ADRPO - SFT"] and [g["goal"] for g in s["goals"]] == ["ADRPO-evidence > SFT"]
    assert "| adrpo | 0, 1, 2 | 40 |" in pooled.stage_table(s) and pooled.stage_table(s).endswith("| - |")
    assert pooled.summary([])["stages"] == {}


def test_rl_differences_are_read_on_either_side_of_period_0():
    """An RL stage that loses a user's first sessions and gains on later ones pools to nothing: the split says which."""
    rows = [_row("sft", 0, 0.0), *(_row("grpo", s, 0.0) for s in range(3))]
    for r in rows[1:]:
        r["session_reward_evidence"] = {k: v + (-0.3 if k.split("/p")[1].startswith("0-") else 0.1)
                                        for k, v in r["session_reward_evidence"].items()}
    s = pooled.summary(rows)
    whole, first, later = (s["differences"]["GRPO - SFT"], s["by_period"]["period 0"]["GRPO - SFT"],
                           s["by_period"]["later periods"]["GRPO - SFT"])
    assert whole["n_sessions"] == 40 and first["n_sessions"] == 10 and later["n_sessions"] == 30
    assert first["mean"] == pytest.approx(-0.3, abs=0.02) and first["reads"] == "below"
    assert later["mean"] == pytest.approx(0.1, abs=0.02) and later["reads"] == "above"
    assert "SFT - base" not in s["by_period"]["period 0"]
    lines = pooled.period_lines(s)
    assert lines[0].startswith("GRPO - SFT, period 0: -0.30") and "over 10 sessions (below)" in lines[0]
    assert lines[1].startswith("GRPO - SFT, later periods: +0.10") and lines[1].endswith("over 30 sessions (above)")
    # sessions that name no world period (a benchmark's) leave the split out rather than guess
    other = [{**r, "session_reward_evidence": {k.replace("u/p", "conv-26/x"): v
                                               for k, v in r["session_reward_evidence"].items()}} for r in rows]
    assert pooled.summary(other)["by_period"] == {} and pooled.period_lines(pooled.summary(other)) == []


def test_a_world_session_id_names_its_period():
    from memgym_env.world.types import session_id_period
    assert session_id_period("3bb2a388-6a63/p10-s2") == 10 and session_id_period("p0-s0") == 0
    assert session_id_period("conv-26/session_3") is None and session_id_period("u/p1-s") is None
