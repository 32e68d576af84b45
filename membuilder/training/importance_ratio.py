"""The importance ratio between the policy and the vLLM engine that sampled its completions, computed in the
loss pass.

TRL corrects for the engine/trainer mismatch with the ratio pi_policy / pi_vllm of each completion (or token),
truncated or masked outside [clip_min, clip_max] (``vllm_importance_sampling_mode``). It gets pi_policy from a
separate no-grad forward right after generation. When the loss runs on the very weights that sampled (one
update per generation batch, no dropout), that forward returns the loss pass's own log-probs, so the ladder's
RL reads them off the loss pass instead (``ADRPOConfig.is_ratio_from_loss``). The modes and the reported
statistics below follow TRL's definitions (trl 1.16, ``GRPOTrainer._generate_and_score_completions``).
"""

from __future__ import annotations

import math

import torch

MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def importance_ratio(policy_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor, mode: str,
                     clip_min: float | None, clip_max: float | None) -> torch.Tensor:
    """pi_policy / pi_vllm per token, shape (B, T), or per completion, shape (B, 1), for the sequence modes.

    Tokens the engine could not score (NaN) count as agreeing (log-ratio 0). Truncate modes clamp the ratio to
    [clip_min, clip_max]; mask modes zero the ratio of whatever falls outside (a None bound is open)."""
    if mode not in MODES:
        raise ValueError(f"vllm_importance_sampling_mode {mode!r} is not one of {', '.join(MODES)}")
    diff = torch.nan_to_num((policy_logps - sampling_logps) * mask, nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


class RatioStats:
    """The engine-mismatch statistics TRL logs per generation batch, accumulated over the loss's micro-batches
    (and processes) until the next log: the mean and largest |log pi_policy - log pi_vllm| over scored
    completion tokens, and the smallest, mean and largest ratio (per completion in the sequence modes)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.delta_sum, self.delta_count, self.delta_max = 0.0, 0, -math.inf
        self.ratio_sum, self.ratio_count, self.ratio_min, self.ratio_max = 0.0, 0, math.inf, -math.inf

    def add(self, policy_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor,
            ratio: torch.Tensor, mode: str, gather=None) -> None:
        """One micro-batch; ``gather`` (``accelerator.gather``) pools the processes' values when given."""
        keep = mask.bool()
        delta = (policy_logps - sampling_logps).abs()
        delta = delta[keep & ~torch.isnan(delta)].double()
        ratios = (ratio.flatten() if mode.startswith("sequence") else ratio[keep]).double()
        sums = torch.tensor([delta.sum().item(), delta.numel(), ratios.sum().item(), ratios.numel()],
                            dtype=torch.float64, device=policy_logps.device)
        extremes = torch.tensor([delta.max().item() if delta.numel() else -math.inf,
                                 -ratios.min().item() if ratios.numel() else -math.inf,
                                 ratios.max().item() if ratios.numel() else -math.inf],
                                dtype=torch.float64, device=policy_logps.device)
        if gather is not None:
            sums = gather(sums.unsqueeze(0)).sum(dim=0)
            extremes = gather(extremes.unsqueeze(0)).max(dim=0).values
        self.delta_sum += float(sums[0])
        self.delta_count += int(sums[1])
        self.ratio_sum += float(sums[2])
        self.ratio_count += int(sums[3])
        self.delta_max = max(self.delta_max, float(extremes[0]))
        self.ratio_min = min(self.ratio_min, -float(extremes[1]))
        self.ratio_max = max(self.ratio_max, float(extremes[2]))

    def pop(self) -> dict[str, float]:
        """The statistics under TRL's metric names (empty when nothing was added), then a fresh start."""
        out: dict[str, float] = {}
        if self.delta_count:
            out["sampling/sampling_logp_difference/mean"] = self.delta_sum / self.delta_count
            out["sampling/sampling_logp_difference/max"] = self.delta_max
        if self.ratio_count:
            out["sampling/importance_sampling_ratio/min"] = self.ratio_min
            out["sampling/importance_sampling_ratio/mean"] = self.ratio_sum / self.ratio_count
            out["sampling/importance_sampling_ratio/max"] = self.ratio_max
        self.reset()
        return out
