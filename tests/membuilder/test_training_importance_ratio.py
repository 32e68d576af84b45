"""The vLLM importance ratio and its statistics as the loss pass computes them
(membuilder/training/importance_ratio.py), on numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from membuilder.training.importance_ratio import RatioStats, importance_ratio

# two completions of 3 tokens; the second one's last token is padding; the engine could not score one token
POLICY = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -0.1, -9.0]])
SAMPLING = torch.tensor([[-1.5, -2.0, float("nan")], [-0.2, -1.3, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_token_modes_clamp_or_zero_each_token_and_a_nan_token_counts_as_agreeing():
    truncated = importance_ratio(POLICY, SAMPLING, MASK, "token_truncate", 0.5, 2.0)
    expected = torch.tensor([[math.exp(0.5), 1.0, 1.0], [1.0, 2.0, 1.0]])  # exp(1.2) clamps to 2
    assert torch.allclose(truncated, expected)
    masked = importance_ratio(POLICY, SAMPLING, MASK, "token_mask", None, 2.0)
    assert torch.allclose(masked, torch.tensor([[math.exp(0.5), 1.0, 1.0], [1.0, 0.0, 1.0]]))


def test_sequence_modes_give_one_ratio_per_completion_from_its_summed_log_ratio():
    truncated = importance_ratio(POLICY, SAMPLING, MASK, "sequence_truncate", None, 3.0)
    assert truncated.shape == (2, 1)
    assert torch.allclose(truncated, torch.tensor([[math.exp(0.5)], [3.0]]))  # exp(1.2) = 3.32 clamps to 3
    masked = importance_ratio(POLICY, SAMPLING, MASK, "sequence_mask", 0.5, 3.0)
    assert torch.allclose(masked, torch.tensor([[math.exp(0.5)], [0.0]]))
    with pytest.raises(ValueError, match="sequence_clip"):
        importance_ratio(POLICY, SAMPLING, MASK, "sequence_clip", None, 3.0)


def test_statistics_pool_micro_batches_until_they_are_popped():
    stats = RatioStats()
    assert stats.pop() == {}
    for rows in (slice(0, 1), slice(1, 2)):  # two micro-batches of one completion each
        ratio = importance_ratio(POLICY[rows], SAMPLING[rows], MASK[rows], "sequence_mask", None, 3.0)
        stats.add(POLICY[rows], SAMPLING[rows], MASK[rows], ratio, "sequence_mask")
    out = stats.pop()
    # scored tokens: |0.5|, 0 (the NaN one is left out), then 0, 1.2
    assert out["sampling/sampling_logp_difference/mean"] == pytest.approx(1.7 / 4)
    assert out["sampling/sampling_logp_difference/max"] == pytest.approx(1.2)
    assert out["sampling/importance_sampling_ratio/min"] == 0.0  # the masked completion
    assert out["sampling/importance_sampling_ratio/max"] == pytest.approx(math.exp(0.5))
    assert out["sampling/importance_sampling_ratio/mean"] == pytest.approx(math.exp(0.5) / 2)
    assert stats.pop() == {}
