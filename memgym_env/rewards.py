"""MemBuilder's dense session-level reward and ADRPO's attribution weights (protocols §2-§3).

For rollout k of a session, agent a gets

    r_a = 1[valid_a] * r_task * (1 - lambda * l_a)        lambda = 0.8

where r_task is the fraction of the session's questions answered correctly from the memory the
rollout built, and l_a in [0, 1] penalises writing too much:

* Core: T tokens written; l = 0 for T <= 150, 1 for T >= 400, linear between.
* Episodic / Semantic / Procedural: q = M / E, the tokens written over the expert's. l = 0 when
  E = 0, when |M - E| is under the tolerance, or when 0.5 <= q <= 1.3; above, min(1, (q-1.3)/0.7);
  below, min(1, (0.5-q)/0.3). Both sides are counted in the same unit (the published code
  compared characters/4 with characters). The tolerance is the published 200 characters,
  i.e. 50 tokens at 4 characters per token.

ADRPO: h_m counts, over all the session's questions, how many retrieved top-10 entries came
from memory type m. The dominant type gets weight alpha, every other agent (Core included) 1;
with nothing retrieved all weights are 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from membuilder.memory.entry import MEMORY_TYPES
from membuilder.ops import AGENTS

LAMBDA = 0.8
CORE_FREE_TOKENS = 150
CORE_FULL_PENALTY_TOKENS = 400
RATIO_LOW, RATIO_HIGH = 0.5, 1.3
TOLERANCE_TOKENS = 50  # the published 200 characters at 4 characters per token


@dataclass(frozen=True)
class LengthRule:
    core_free: int = CORE_FREE_TOKENS
    core_full: int = CORE_FULL_PENALTY_TOKENS
    ratio_low: float = RATIO_LOW
    ratio_high: float = RATIO_HIGH
    tolerance: int = TOLERANCE_TOKENS


DEFAULT_LENGTH_RULE = LengthRule()


def core_length_penalty(tokens: int, rule: LengthRule = DEFAULT_LENGTH_RULE) -> float:
    if tokens <= rule.core_free:
        return 0.0
    if tokens >= rule.core_full:
        return 1.0
    return (tokens - rule.core_free) / (rule.core_full - rule.core_free)


def store_length_penalty(written: int, expert: int, rule: LengthRule = DEFAULT_LENGTH_RULE) -> float:
    if expert <= 0 or abs(written - expert) < rule.tolerance:
        return 0.0
    q = written / expert
    if rule.ratio_low <= q <= rule.ratio_high:
        return 0.0
    if q > rule.ratio_high:
        return min(1.0, (q - rule.ratio_high) / 0.7)
    return min(1.0, (rule.ratio_low - q) / 0.3)


def length_penalty(agent: str, written: int, expert: int, rule: LengthRule = DEFAULT_LENGTH_RULE) -> float:
    return core_length_penalty(written, rule) if agent == "core" else store_length_penalty(written, expert, rule)


def agent_reward(valid: bool, task_reward: float, penalty: float, lam: float = LAMBDA) -> float:
    return float(valid) * task_reward * (1.0 - lam * penalty)


def attribution_counts(retrieved_types: Iterable[Iterable[str]]) -> dict[str, int]:
    """h_m: for each question's retrieved top-10, count the entries of each memory type."""
    counts = dict.fromkeys(MEMORY_TYPES, 0)
    for types in retrieved_types:
        for t in types:
            counts[t] += 1
    return counts


def attribution_weights(counts: Mapping[str, int], alpha: float) -> dict[str, float]:
    """w_a: alpha for the dominant memory type (first in order on a tie), 1 for the rest and Core."""
    weights = dict.fromkeys(AGENTS, 1.0)
    if any(counts.get(t, 0) > 0 for t in MEMORY_TYPES):
        dominant = max(MEMORY_TYPES, key=lambda t: (counts.get(t, 0), -MEMORY_TYPES.index(t)))
        weights[dominant] = float(alpha)
    return weights
