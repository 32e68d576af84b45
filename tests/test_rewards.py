"""The reward formula of protocols §2-§3, on hand-computed cases."""

from __future__ import annotations

import pytest

from memgym_env import rewards as R


@pytest.mark.parametrize("tokens,expected", [(0, 0.0), (150, 0.0), (275, 0.5), (400, 1.0), (900, 1.0)])
def test_core_length_penalty_bands(tokens, expected):
    assert R.core_length_penalty(tokens) == pytest.approx(expected)


@pytest.mark.parametrize(
    "written,expert,expected",
    [
        (500, 0, 0.0),  # no expert text: no reference, no penalty
        (140, 100, 0.0),  # |M - E| = 40 is inside the 50-token tolerance
        (1200, 1000, 0.0),  # q = 1.2 inside [0.5, 1.3]
        (160, 100, 0.3 / 0.7),  # q = 1.6: (1.6 - 1.3) / 0.7
        (200, 100, 1.0),  # q = 2.0: capped at 1
        (80, 200, 0.1 / 0.3),  # q = 0.4: (0.5 - 0.4) / 0.3
        (40, 200, 1.0),  # q = 0.2: capped at 1
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
