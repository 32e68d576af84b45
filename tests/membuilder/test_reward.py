"""The reward formula of protocols §2-§3, on hand-computed cases: membuilder.reward is its one home."""

from __future__ import annotations

import pytest

from membuilder import reward as R


@pytest.mark.parametrize("tokens,expected", [(0, 0.0), (150, 0.0), (275, 0.5), (400, 1.0), (900, 1.0)])
def test_core_length_penalty_bands(tokens, expected):
    assert R.core_length_penalty(tokens) == pytest.approx(expected)


@pytest.mark.parametrize(
    "written,expert,expected",
    [
        (500, 0, 0.0),  # no expert text: no reference, no penalty
        (300, 100, 1.0),  # |M - E| = 200 is outside the tolerance: q = 3, capped at 1
        (299, 100, 0.0),  # |M - E| = 199 is inside the published 200-token tolerance
        (1200, 1000, 0.0),  # q = 1.2 inside [0.5, 1.3]
        (800, 500, 0.3 / 0.7),  # q = 1.6: (1.6 - 1.3) / 0.7
        (1000, 500, 1.0),  # q = 2.0: capped at 1
        (400, 1000, 0.1 / 0.3),  # q = 0.4: (0.5 - 0.4) / 0.3
        (200, 1000, 1.0),  # q = 0.2: capped at 1
    ],
)
def test_store_length_penalty_bands(written, expert, expected):
    assert R.store_length_penalty(written, expert) == pytest.approx(expected)


def test_agent_reward_is_gated_by_validity_and_scaled_by_penalty():
    assert R.agent_reward(False, 1.0, 0.0) == 0.0
    assert R.agent_reward(True, 0.6, 0.5) == pytest.approx(0.6 * (1 - 0.8 * 0.5))
    assert R.agent_reward(True, 0.6, 0.5, lam=0.0) == pytest.approx(0.6)


def test_attribution_counts_and_weights():
    counts = R.attribution_counts([["semantic", "semantic", "episodic"], ["semantic", "procedural"]])
    assert counts == {"episodic": 1, "semantic": 3, "procedural": 1}
    assert R.attribution_weights(counts, alpha=4) == {"core": 1.0, "episodic": 1.0, "semantic": 4.0, "procedural": 1.0}
    assert R.attribution_weights({"episodic": 0, "semantic": 0, "procedural": 0}, alpha=4) == dict.fromkeys(
        ["core", "episodic", "semantic", "procedural"], 1.0)
    # A tie goes to the first type in order, so the weights are a function of the counts alone.
    assert R.attribution_weights({"episodic": 2, "semantic": 2, "procedural": 0}, alpha=2)["episodic"] == 2.0


def test_lambda_zero_means_no_length_penalty_and_none_is_refused():
    long = {"core": 900, "episodic": 0, "semantic": 0, "procedural": 0}
    valid = dict.fromkeys(long, True)
    off = R.candidate_reward(valid, long, {}, task_reward=0.5, lam=0)
    assert off.length_penalty["core"] == 1.0 and off.agent_rewards["core"] == 0.5
    on = R.candidate_reward(valid, long, {}, task_reward=0.5, lam=0.8)
    assert on.agent_rewards["core"] == pytest.approx(0.5 * 0.2)
    with pytest.raises(ValueError, match="lambda"):
        R.candidate_reward(valid, long, {}, task_reward=0.5, lam=None)


def test_unrewarded_session_keeps_validity_and_length_with_no_dominant_type():
    valid = {"core": True, "episodic": False, "semantic": True, "procedural": True}
    tokens = {"core": 275, "episodic": 10, "semantic": 10, "procedural": 10}
    r = R.candidate_reward(valid, tokens, {}, task_reward=None, counts={"semantic": 9}, lam=0.8, alpha=4)
    assert not r.task_rewarded and r.task_reward == 0.0
    assert r.agent_rewards == {"core": pytest.approx(1 - 0.8 * 0.5), "episodic": 0.0, "semantic": 1.0,
                               "procedural": 1.0}
    assert r.dominant is None and set(r.weights.values()) == {1.0}


def test_dominant_is_reported_whatever_alpha_is():
    counts = {"episodic": 1, "semantic": 3, "procedural": 0}
    valid = dict.fromkeys(["core", "episodic", "semantic", "procedural"], True)
    for alpha in (1.0, 4.0):
        r = R.candidate_reward(valid, {}, {}, task_reward=1.0, counts=counts, alpha=alpha)
        assert r.dominant == "semantic" and r.weights["semantic"] == alpha
