"""Interactive-evaluation metrics on hand-computed arrays (AMemGym formulas, protocols §4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memgym_env.interactive import metrics


def test_accuracy_per_user_and_period_with_a_missing_period():
    acc = metrics.accuracy([[[True, False, True, True], [False, False, False, True]], [[True, True, True, True]]])
    assert acc[0].tolist() == [0.75, 0.25]
    assert acc[1, 0] == 1.0 and math.isnan(acc[1, 1])


def test_random_baseline_is_the_mean_inverse_number_of_choices():
    rand = metrics.random_baseline([[[4, 4, 5, 2]]])
    assert rand[0, 0] == pytest.approx((0.25 + 0.25 + 0.2 + 0.5) / 4)  # 0.3


def test_memory_score_normalises_between_random_and_upper_bound():
    acc = np.array([[0.6, 0.2, 0.5]])
    upper = np.array([[0.9, 0.9, 0.3]])
    rand = np.array([[0.3, 0.3, 0.3]])
    score = metrics.memory_score(acc, upper, rand)
    assert score[0, 0] == pytest.approx(0.5)  # (0.6 - 0.3) / (0.9 - 0.3)
    assert score[0, 1] == pytest.approx(-1 / 6)  # below chance is negative, not clipped
    assert math.isnan(score[0, 2])  # upper bound == random: guarded, no division by zero
    assert metrics.nanmean(score) == pytest.approx((0.5 - 1 / 6) / 2)  # the undefined cell is left out


def test_nanmean_of_nothing_defined_is_nan_without_warning():
    with np.errstate(all="raise"):
        assert math.isnan(metrics.nanmean(np.array([np.nan, np.nan])))


def test_last_written_finds_the_period_the_current_value_arrived():
    states = [{"a": "x", "b": "p"}, {"a": "y", "b": "p"}, {"a": "y", "b": "q"}, {"a": "y", "b": "q"}]
    assert [metrics.last_written(states, 3, v) for v in "ab"] == [1, 2]
    assert metrics.last_written(states, 0, "a") == 0
    assert metrics.last_written(states, 1, "b") == 0


@pytest.mark.parametrize("correct, now, at_write, label", [
    (True, {"a": False, "b": False}, {"a": False, "b": False}, "success"),
    (False, {"a": True, "b": True}, {"a": True, "b": True}, "utilization"),  # knew everything, still wrong
    (False, {"a": True, "b": False}, {"a": True, "b": False}, "write"),  # b never made it into memory
    (False, {"a": True, "b": False}, {"a": True, "b": True}, "read"),  # b was there when written, lost now
    (False, {"a": False, "b": False}, {"a": True, "b": False}, "write"),  # read (a) and write (b): write wins
])
def test_failure_label_on_crafted_cases(correct, now, at_write, label):
    assert metrics.failure_label(correct, ["a", "b"], now, at_write) == label


def test_diagnosis_uses_the_probe_of_the_period_a_variable_was_last_written():
    states = [{"a": "x", "b": "p"}, {"a": "y", "b": "p"}]
    correct = [[False], [False]]
    required = [["a", "b"]]
    recalled = [{"a": True, "b": True}, {"a": False, "b": False}]
    # Period 1: a changed in period 1 and is not recalled then -> write; b (written in period 0,
    # recalled then, lost now) alone would be read; write wins.
    assert metrics.diagnose_user(states, correct, required, recalled) == [["utilization"], ["write"]]
    recalled[1]["a"] = True
    assert metrics.diagnose_user(states, correct, required, recalled)[1] == ["read"]


def test_diagnosis_rates_sum_to_one_minus_accuracy():
    labels = [[["success", "write", "read", "utilization"], ["success", "success", "write", "write"]],
              [["success", "read", "success", "success"], ["write", "utilization", "success", "read"]]]
    rates = metrics.diagnosis_rates(labels)
    assert rates["write"].tolist() == [1 / 8, 3 / 8]
    assert rates["read"].tolist() == [2 / 8, 1 / 8]
    assert rates["utilization"].tolist() == [1 / 8, 1 / 8]
    acc = np.array([4 / 8, 3 / 8])
    total = rates["write"] + rates["read"] + rates["utilization"]
    assert np.allclose(total, 1 - acc)
    overall = metrics.overall_rates(labels)
    assert overall["write"] + overall["read"] + overall["utilization"] == pytest.approx(1 - 7 / 16)


def test_new_facts_are_everything_at_period_zero_then_the_changes():
    states = [{"a": "x", "b": "p"}, {"a": "y", "b": "p"}]
    assert metrics.new_facts(states, 0) == {"a": "x", "b": "p"}
    assert metrics.new_facts(states, 1) == {"a": "y"}
    assert metrics.factual_recall([True, False, True, True]) == 0.75
    assert math.isnan(metrics.factual_recall([]))


def test_evidence_matching_needs_the_revealing_session_or_core():
    entries = [("Diet: vegetarian, no meat or fish | Details: since March", ["p1-s0"]),
               ("Hobby: board games", ["p0-s0"])]
    assert metrics.evidence_supports("vegetarian, no meat or fish", {"p1-s0"}, entries, core="")
    assert not metrics.evidence_supports("vegetarian, no meat or fish", {"p2-s0"}, entries, core="")
    assert metrics.evidence_supports("vegetarian, no meat or fish", {"p2-s0"}, entries, core="User is vegetarian; no meat or fish.")
    assert not metrics.evidence_supports("a small town", {"p0-s0"}, entries, core="")


def test_verbatim_support_needs_the_whole_value_in_order_and_ignores_tiny_values():
    memory = "- Work arrangement: Fully remote.\n- Pet: a beagle called Max"
    assert metrics.states_verbatim("fully remote", memory)
    assert metrics.states_verbatim("a beagle called Max", memory)
    assert not metrics.states_verbatim("remote fully", memory)  # words out of order
    assert not metrics.states_verbatim("a beagle", "a beagles life")  # whole words only
    assert not metrics.states_verbatim("no", "no pets")  # too short to mean anything


def test_an_upper_bound_within_a_few_points_of_random_leaves_the_score_undefined():
    acc, upper, rand = np.array([[0.5, 0.25]]), np.array([[0.28, 0.25]]), np.array([[0.25, 0.25]])
    score = metrics.memory_score(acc, upper, rand)
    assert math.isnan(score[0, 0]) and math.isnan(score[0, 1])  # 0.5 would have scored 8.3 against 0.03 headroom
    assert metrics.low_headroom(upper, rand).tolist() == [[True, True]]
    assert metrics.memory_score(acc, upper, rand, min_headroom=0.01)[0, 0] == pytest.approx(25 / 3)


def test_wilson_interval_by_hand():
    lo, hi = metrics.wilson(8, 16)
    assert lo == pytest.approx(0.2800, abs=1e-3) and hi == pytest.approx(0.7200, abs=1e-3)
    assert metrics.wilson(0, 0) is None and metrics.wilson(0, 5)[0] == 0.0


def test_score_interval_holds_the_score_and_narrows_with_more_questions():
    upper, rand = np.array([[1.0]]), np.array([[0.25]])
    few = [[[True, False, True, False]]]
    many = [[[True, False, True, False] * 25]]
    point = metrics.nanmean(metrics.memory_score(metrics.accuracy(few), upper, rand))
    lo, hi = metrics.score_interval(few, upper, rand)
    assert lo <= point <= hi
    lo2, hi2 = metrics.score_interval(many, upper, rand)
    assert hi2 - lo2 < (hi - lo) / 3
    assert metrics.score_interval(few, np.array([[0.25]]), rand) is None


def test_the_table_gives_question_counts_intervals_and_flags_low_headroom_cells():
    from memgym_env.interactive.results import notes, table

    r = {"assistant": "rag", "mode": "off-policy", "usage_by_stage": {},
         "overall": {"accuracy": 0.5, "upper_bound": 0.6, "random": 0.25, "memory_score": 0.7, "write": 0.2,
                     "read": 0.2, "utilization": 0.1, "factual_recall": None, "questions": 16,
                     "accuracy_ci95": [0.28, 0.72], "memory_score_ci95": [0.1, 1.3], "memory_score_cells": 3,
                     "memory_score_cells_low_headroom": 1, "min_headroom": 0.05}}
    text = table([r])
    assert "| 16 " in text and "[0.28, 0.72]" in text and "[0.10, 1.30]" in text
    assert "1 user-period cells have an upper bound within 0.05 of random" in notes([r])
