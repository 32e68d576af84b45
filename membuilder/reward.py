"""MemBuilder's dense session reward and ADRPO's attribution weights: the one definition.

MemoryGym-v0, its trainer scorer and the format-only scorer all build rewards here, and the
trainer uses what they return as it is; nothing else computes a reward (protocols §2, §3, §6).

For rollout k of a session, agent a gets

    r_a = 1[valid_a] * r_task * (1 - lambda * l_a)        lambda = 0.8 (0 turns the penalty off)

where r_task is the fraction of the session's questions answered correctly from the memory the
rollout built, and l_a in [0, 1] penalises writing too much or too little:

* Core: T tokens written; l = 0 for T <= 150, 1 for T >= 400, linear between.
* Episodic / Semantic / Procedural: q = M / E, the tokens written over the expert's. l = 0 when
  E = 0, when |M - E| < 200 tokens, or when 0.5 <= q <= 1.3; above, min(1, (q-1.3)/0.7);
  below, min(1, (0.5-q)/0.3). Both sides are counted in tokens: the published config names the
  dead zone ``other_length_min_diff_tokens: 200`` (the published code then compared
  characters / 4 with characters, which we do not copy).
* l_a is only computed when r_task > 0 (with r_task = 0 the reward is 0 whatever the length).

Reward density 1/d: a session that does not get the task reward this time is *unrewarded*:
no question is asked, r_task is taken as 1 (validity and the length penalty remain), and no
memory type is dominant, so every attribution weight is 1.

ADRPO's attribution names a dominant memory type d per rollout; d's agent gets weight alpha,
every other agent 1, and with no dominant type all weights are 1. Two rules (``ATTRIBUTION_RULES``):

* ``retrieval`` (published): h_m counts, over all the session's questions, how many retrieved
  top-10 entries came from memory type m; d = argmax h_m (first in order on a tie), never Core.
  On a world whose store is mostly Semantic this names Semantic almost always.
* ``evidence``: each answered question names the memory that held its evidence (the best-ranked
  live entry shown that holds it, else Core; ``memgym_env.construction.answers``); d is the type
  named by more than half of the answered questions that name one (Core included), else none.

Both rules are computed for every rollout (``dominant_by_rule``) whichever one sets the weights,
and ``dominant`` is reported whatever alpha is, so alpha = 1 runs log what alpha = 4 runs log.

An edit quotes the memory it changes (UPDATE's old memory, MERGE's old memories, Core REPLACE's old
text). When a quote matches nothing, even as a near paraphrase (``VectorStore.resolve``), an UPDATE
or MERGE adds its new text as a new entry, so the old one stays live beside it, and a Core
REPLACE changes nothing (``MemoryBank.apply``). Two rules for what such an output earns
(``QUOTE_MISS_RULES``):

* ``add`` (the default, as the published reward): nothing more; the memory is scored as it stands.
* ``zero``: the same memory, and the misquoting agent's r_a is 0, as if its output were invalid. The
  task reward is shared by the four agents of a rollout, so under ``add`` a misquote reaches the agent
  that wrote it only through the questions it spoils, blurred by the others' writes; ``zero`` tells that
  agent alone. Validity (``valid``) stays the JSON check; ``misquoted`` says who was zeroed.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from membuilder.memory.entry import MEMORY_TYPES
from membuilder.memory.ops import AGENTS

LAMBDA = 0.8
# ADRPO's weight of the dominant memory type's agent: MemBuilder's published alpha (arXiv 2601.05488),
# the best of the 1, 2, 4, 8 and 16 it tried (its LoCoMo ablation: alpha 1 82.82, alpha 4 84.04)
ALPHA = 4.0
CORE_FREE_TOKENS = 150
CORE_FULL_PENALTY_TOKENS = 400
RATIO_LOW, RATIO_HIGH = 0.5, 1.3
TOLERANCE_TOKENS = 200  # published other_length_min_diff_tokens
ATTRIBUTION_RULES = ("retrieval", "evidence")
QUOTE_MISS_RULES = ("add", "zero")


@dataclass(frozen=True)
class LengthRule:
    core_free: int = CORE_FREE_TOKENS
    core_full: int = CORE_FULL_PENALTY_TOKENS
    ratio_low: float = RATIO_LOW
    ratio_high: float = RATIO_HIGH
    tolerance: int = TOLERANCE_TOKENS


DEFAULT_LENGTH_RULE = LengthRule()
_WORD = re.compile(r"\w+|[^\w\s]")


def approx_tokens(text: str) -> int:
    """Word-piece count, the token counter when no answering tokenizer is loaded."""
    return len(_WORD.findall(text))


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


def check_lambda(lam: Any) -> float:
    """lambda as given: 0 is no length penalty, and there is no implicit default."""
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0.0 <= lam <= 1.0:
        raise ValueError(f"length-penalty weight lambda must be a number in [0, 1] (0 = no length penalty); got {lam!r}")
    return float(lam)


def agent_reward(valid: bool, task_reward: float, penalty: float, lam: float = LAMBDA) -> float:
    return float(valid) * task_reward * (1.0 - lam * penalty)


def attribution_counts(retrieved_types: Iterable[Iterable[str]]) -> dict[str, int]:
    """h_m: for each question's retrieved top-10, count the entries of each memory type."""
    counts = dict.fromkeys(MEMORY_TYPES, 0)
    for types in retrieved_types:
        for t in types:
            counts[t] += 1
    return counts


def dominant_type(counts: Mapping[str, int]) -> str | None:
    """The memory type most retrieved (first in order on a tie); None when nothing was retrieved."""
    if not any(counts.get(t, 0) > 0 for t in MEMORY_TYPES):
        return None
    return max(MEMORY_TYPES, key=lambda t: (counts.get(t, 0), -MEMORY_TYPES.index(t)))


def evidence_dominant(evidence_types: Iterable[str | None]) -> str | None:
    """The memory (Core included) named by more than half of the answered questions that name one; None otherwise."""
    named = [t for t in evidence_types if t is not None]
    for t in AGENTS:
        if 2 * named.count(t) > len(named):
            return t
    return None


def attribution_weights(counts: Mapping[str, int], alpha: float) -> dict[str, float]:
    """w_a under the retrieval rule: alpha for the most retrieved memory type's agent, 1 for the rest and Core."""
    return dominant_weights(dominant_type(counts), alpha)


def dominant_weights(dominant: str | None, alpha: float) -> dict[str, float]:
    """w_a: alpha for the dominant memory's agent, 1 for every other agent; all 1 with none dominant."""
    weights = dict.fromkeys(AGENTS, 1.0)
    if dominant is not None:
        weights[dominant] = float(alpha)
    return weights


def check_quote_miss(rule: Any) -> str:
    if rule not in QUOTE_MISS_RULES:
        raise ValueError(f"quote_miss rule {rule!r}; expected one of {QUOTE_MISS_RULES}")
    return rule


def check_attribution(rule: Any) -> str:
    if rule not in ATTRIBUTION_RULES:
        raise ValueError(f"attribution rule {rule!r}; expected one of {ATTRIBUTION_RULES}")
    return rule


@dataclass
class CandidateReward:
    """The reward of one rollout (four agent outputs) of one session."""

    agent_rewards: dict[str, float]  # r_a per agent
    weights: dict[str, float]  # ADRPO attribution weight w_a per agent
    task_reward: float  # fraction of the session's questions answered correctly (0 when unrewarded)
    valid: dict[str, bool] = field(default_factory=dict)
    length_penalty: dict[str, float] = field(default_factory=dict)
    task_rewarded: bool = True  # False: reward density skipped the task reward for this session
    dominant: str | None = None  # the dominant memory under the rule that sets the weights; None: none
    info: dict[str, Any] = field(default_factory=dict)
    dominant_by_rule: dict[str, str | None] = field(default_factory=dict)  # rule -> its dominant memory
    misquoted: dict[str, bool] = field(default_factory=dict)  # agents whose r_a the quote_miss rule zeroed

    @property
    def reward(self) -> float:
        return sum(self.agent_rewards.values()) / max(1, len(self.agent_rewards))


def candidate_reward(valid: Mapping[str, bool], tokens_written: Mapping[str, int], tokens_expert: Mapping[str, int],
                     *, task_reward: float | None, counts: Mapping[str, int] | None = None, lam: float = LAMBDA,
                     alpha: float = ALPHA, rule: LengthRule = DEFAULT_LENGTH_RULE,
                     info: Mapping[str, Any] | None = None, evidence_types: Sequence[str | None] | None = None,
                     attribution: str = "retrieval", quote_misses: Mapping[str, int] | None = None,
                     quote_miss: str = "add") -> CandidateReward:
    """r_a for every agent and the attribution weights of one rollout.

    ``task_reward`` None means an unrewarded session (r_task taken as 1, no dominant type).
    ``counts``: h_m of the retrieval rule; ``evidence_types``: the memory named by each answered
    question, for the evidence rule; ``attribution`` picks the rule that sets the weights.
    ``quote_misses``: per agent, the quotes of its edits that matched nothing; under the ``zero`` rule
    (``quote_miss``) an agent with any gets r_a = 0.
    """
    lam = check_lambda(lam)
    check_attribution(attribution)
    check_quote_miss(quote_miss)
    misquoted = {a: quote_miss == "zero" and bool((quote_misses or {}).get(a, 0)) for a in AGENTS}
    rewarded = task_reward is not None
    task = task_reward if rewarded else 1.0
    penalty = {a: length_penalty(a, tokens_written.get(a, 0), tokens_expert.get(a, 0), rule) if task > 0 else 0.0
               for a in AGENTS}
    counts = dict(counts or {}) if rewarded else dict.fromkeys(MEMORY_TYPES, 0)
    by_rule = {"retrieval": dominant_type(counts),
               "evidence": evidence_dominant(evidence_types or ()) if rewarded else None}
    return CandidateReward(
        agent_rewards={a: agent_reward(valid[a] and not misquoted[a], task, penalty[a], lam) for a in AGENTS},
        weights=dominant_weights(by_rule[attribution], alpha),
        task_reward=task if rewarded else 0.0,
        valid=dict(valid),
        length_penalty=penalty,
        task_rewarded=rewarded,
        dominant=by_rule[attribution],
        info={"tokens_written": dict(tokens_written), "tokens_expert": dict(tokens_expert),
              "attribution_counts": counts, **(info or {})},
        dominant_by_rule=by_rule,
        misquoted=misquoted,
    )


def written_tokens(texts: Mapping[str, str], count: Callable[[str], int] = approx_tokens) -> dict[str, int]:
    """Tokens of each agent's written text (0 for none)."""
    return {a: count(texts.get(a) or "") if texts.get(a) else 0 for a in AGENTS}


def task_rewarded_coin(seed: int, step: int, session_key: str, reward_density: int) -> bool:
    """Reward density 1/d: whether a session gets the task reward at a training step, a seeded coin
    per (seed, step, session), so every trainer and every process draws the same one."""
    if reward_density == 1:
        return True
    rng = random.Random(zlib.crc32(f"{seed}|{step}|{session_key}".encode()))
    return rng.random() < 1.0 / reward_density


class CandidateScorer(Protocol):
    """What the trainer asks of whatever scores memory writes (in practice MemoryGym-v0's
    ``SessionScorer``). Training code never imports the environment; it receives one of these."""

    reward_density: int  # d: the trainer gives a session the task reward with probability 1/d

    def session_keys(self) -> Sequence[str]:
        """Every session that can be scored, as stable string keys."""
        ...

    def observation(self, session_key: str) -> Mapping[str, Any]:
        """The construction observation of a session (what the policy's prompts render)."""
        ...

    def score(self, session_key: str, candidates: Sequence[Mapping[str, str]], *,
              task_rewarded: bool = True) -> list[CandidateReward]:
        """Score G candidate actions (agent -> raw output) of one session from one shared snapshot.
        With ``task_rewarded=False`` no question is asked (see the module docstring)."""
        ...
