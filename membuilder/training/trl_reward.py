"""The TRL reward function of memory-construction sessions, for ``ADRPOTrainer`` and a plain ``trl.GRPOTrainer``.

The dataset holds one row per (session, agent) (``prompts.rl_rows``: columns ``prompt``,
``session_key``, ``agent``); TRL draws G completions of each row and passes the batch to
``SessionReward``, which groups the completions by session:

* a session whose four agents are all in the batch with G completions each is a joint rollout
  (MemBuilder's): rollout k is the k-th completion of every agent;
* otherwise (a plain trainer's batch may cut a session, or train one agent alone) each agent's
  completions are scored on their own, the other three agents writing what the expert wrote
  (``scorer.expert_action``). ``whole_sessions=True`` refuses such a batch instead, as ADRPO must.

``credit="per_agent"`` scores every agent that second way even when its session is whole: an
agent's G rewards then differ only by its own outputs. In a joint rollout they also carry the
other three agents' k-th samples: re-scored by ``python -m train.ladder.credit_check``, the
tracks-change ladder's GRPO rollouts give a Procedural UPDATE that found its entry +0.144
[-0.028, 0.331] over an ADD within a group jointly and +0.297 [0.106, 0.488] per agent
(``train/ladder/README.md``, "Credit per agent").

A ``CandidateScorer`` scores each session's G candidates together, from one shared snapshot, and
each completion gets its own agent's reward r_a exactly as the scorer returns it
(``membuilder.reward`` is the one definition). The attribution weights w are kept in
``last_weights``: ``ADRPOTrainer`` multiplies the advantages by them; a plain trainer only logs them.

Metrics, one set whichever trainer runs (each averaged over the batch's rows):
``reward/task`` (rewarded sessions only), ``reward/task_rewarded``, ``reward/answers_cut``,
``reward/valid_<agent>``, ``reward/length_penalty_<agent>``, ``reward/quote_missed_<agent>`` (the share of
outputs with an edit whose quoted memory matched nothing, under either ``quote_miss`` rule), ``adrpo/weight_<agent>``,
``adrpo/weight_mean``, ``adrpo/dominant_<type>``, ``adrpo/dominant_none`` and ``time/score``. TRL
logs the rewards themselves as ``rewards/session_reward/mean``. ``reward/tied_groups``: the share of
(session, agent) groups whose G rewards all tie, which give GRPO no gradient.

Both attribution rules, whichever one sets the weights (``CandidateReward.dominant_by_rule``; a
reward without a rule, e.g. from an older remote server, logs nothing for it), for rule in
``retrieval`` and ``evidence``: ``attribution/<rule>/dominant_<core|episodic|semantic|procedural|none>``,
the share of the batch's rollouts, and ``attribution/<rule>/entropy``, the entropy in bits of that
distribution (one value per batch; over several processes, the mean of each process's).

The learnable share, when the scorer has ``baselines(key)`` (MemoryGym-v0's ``SessionScorer``:
the rewards of writing nothing and of the expert, scored once per session): ``reward/noop`` and
``reward/oracle`` (mean over the batch's task-rewarded sessions), ``reward/oracle_gain`` (oracle
minus no-op, the most a policy can add), and ``reward/gain``: each task-rewarded rollout's session
reward (``CandidateReward.reward``, the mean over agents) minus its session's no-op reward, mean
over rollouts. An unrewarded session has no task reward to compare, so it is left out of all four.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from membuilder.memory.ops import AGENTS, SEARCHABLE_AGENTS
from membuilder.reward import ATTRIBUTION_RULES, CandidateReward, CandidateScorer, task_rewarded_coin

CREDITS = ("joint", "per_agent")  # how a whole session's completions are scored (the module's note)
TIE_TOLERANCE = 1e-9  # rewards closer than this count as a tie (GRPO's advantages would be 0 for the group)


def tied(rewards) -> bool:
    """Whether a group's rewards tie (within ``TIE_TOLERANCE``): GRPO gives such a group no gradient."""
    return max(rewards) - min(rewards) <= TIE_TOLERANCE
ScoreRequest = tuple[str, list[dict[str, str]], bool]  # (session key, G candidates, task_rewarded)


def completion_text(completion: Any) -> str:
    """A completion as TRL passes it: plain text, one message, or a conversation (its assistant turns)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content", ""))
    return "".join(m.get("content", "") for m in completion if m.get("role") == "assistant")


def entropy_bits(shares: list[float]) -> float:
    """Entropy in bits of a distribution given as shares summing to 1."""
    return max(0.0, -sum(p * math.log2(p) for p in shares if p > 0))


def attribution_stats(results: list[CandidateReward]) -> dict[str, list[float]]:
    """Per rule, whether each of ``results`` names each dominant memory (or none): one 0/1 a rollout, so
    their mean is the share and the means of several processes combine by rollouts; and the entropy of
    those shares, one value."""
    out: dict[str, list[float]] = {}
    for rule in ATTRIBUTION_RULES:
        named = [c.dominant_by_rule[rule] for c in results if rule in (c.dominant_by_rule or {})]
        if not named:
            continue
        for t in (*AGENTS, None):
            out[f"attribution/{rule}/dominant_{t or 'none'}"] = [float(d == t) for d in named]
        shares = [sum(d == t for d in named) / len(named) for t in (*AGENTS, None)]
        out[f"attribution/{rule}/entropy"] = [entropy_bits(shares)]
    return out


def score_sessions(scorer: CandidateScorer, requests: list[ScoreRequest]) -> list[list[CandidateReward]]:
    """Each (session key, candidates, task_rewarded) scored; a scorer with ``score_many`` (a remote
    one, over several replicas) gets the whole batch at once so it can score sessions in parallel."""
    many = getattr(scorer, "score_many", None)
    if many is not None:
        return many(requests)
    return [scorer.score(key, candidates, task_rewarded=rewarded) for key, candidates, rewarded in requests]


class SessionReward:
    """A TRL reward function: scores each session's G rollouts together and keeps the ADRPO weights.

    After each call ``last_rewards``, ``last_weights`` and ``last_rewarded`` hold one value per
    completion (batch order) and ``last_stats`` the batch's metrics (``last_stat_totals``: their
    sums and counts, to average over processes).

    Args:
        scorer: scores G candidate actions of a session (``membuilder.reward.CandidateScorer``).
        reward_density: d, the task reward on a seeded share 1/d of (session, step); default the scorer's.
        seed: the seed of that coin (ADRPO passes the run's seed).
        whole_sessions: every session must come whole (four agents, G completions each), as
            ``SessionRepeatSampler`` delivers them; False scores a cut session agent by agent.
        log_metrics: send the metrics through TRL's ``log_metric``; ``ADRPOTrainer`` logs them
            itself, beside its own, and turns this off.
        credit: ``joint`` (MemBuilder: rollout k is every agent's k-th completion) or ``per_agent``
            (each agent's completions written beside the expert's other three; needs the scorer's
            ``expert_action``).
    """

    __name__ = "session_reward"

    def __init__(self, scorer: CandidateScorer, reward_density: int | None = None, seed: int = 0,
                 whole_sessions: bool = False, log_metrics: bool = True, credit: str = "joint"):
        reward_density = scorer.reward_density if reward_density is None else reward_density
        if not isinstance(reward_density, int) or reward_density < 1:
            raise ValueError(f"reward_density d must be an integer >= 1 (task reward with probability 1/d); "
                             f"got {reward_density!r}")
        self.scorer, self.reward_density, self.seed = scorer, reward_density, seed
        if credit not in CREDITS:
            raise ValueError(f"credit {credit!r}; expected one of {CREDITS}")
        if credit == "per_agent" and not callable(getattr(scorer, "expert_action", None)):
            raise TypeError(f"credit 'per_agent' writes the expert's outputs beside each agent's, and "
                            f"{type(scorer).__name__} has no expert_action(session_key)")
        self.whole_sessions, self.log_metrics, self.credit = whole_sessions, log_metrics, credit
        self.last_weights: list[float] = []
        self.last_rewards: list[float] = []
        self.last_rewarded: list[bool] = []
        self.last_stats: dict[str, float] = {}
        self.last_stat_totals: dict[str, tuple[float, int]] = {}  # name -> (sum, count), to average over processes

    def task_rewarded(self, session_key: str, step: int) -> bool:
        """Reward density 1/d: a seeded coin per (session, step)."""
        return task_rewarded_coin(self.seed, step, session_key, self.reward_density)

    def __call__(self, prompts, completions, session_key, agent, trainer_state=None,
                 log_metric: Callable[[str, float], None] | None = None, **_) -> list[float]:
        step = trainer_state.global_step if trainer_state is not None else 0
        # (session, agent) -> batch positions, in order: position k is that agent's k-th completion.
        where: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for i, (key, a) in enumerate(zip(session_key, agent, strict=True)):
            if a not in AGENTS:
                raise ValueError(f"row {i}: agent {a!r} is not one of {list(AGENTS)}")
            where[key][a].append(i)
        started = time.perf_counter()
        groups: list[tuple[str, dict[str, list[int]]]] = []  # (session, agent -> its rows), one score request each
        requests: list[ScoreRequest] = []
        for key, by_agent in where.items():
            rewarded = self.task_rewarded(key, step)
            for rows in self._groups(key, by_agent):
                g = len(next(iter(rows.values())))
                expert = {} if len(rows) == len(AGENTS) else self._expert(key)
                candidates = [{**expert, **{a: completion_text(completions[rows[a][k]]) for a in rows}}
                              for k in range(g)]
                groups.append((key, rows))
                requests.append((key, candidates, rewarded))
        scored = score_sessions(self.scorer, requests)
        rewards, weights, rewarded_rows = [0.0] * len(prompts), [1.0] * len(prompts), [True] * len(prompts)
        stats: dict[str, list[float]] = defaultdict(list)
        baselines = getattr(self.scorer, "baselines", None)
        baselines = baselines if callable(baselines) else None
        seen: set[str] = set()  # sessions whose baselines are counted already (a cut session is several groups)
        for (key, rows), (_, candidates, rewarded), results in zip(groups, requests, scored, strict=True):
            if len(results) != len(candidates):
                raise RuntimeError(f"session {key!r}: the scorer returned {len(results)} rewards for "
                                   f"{len(candidates)} rollouts")
            for k, c in enumerate(results):
                for a in rows:
                    i = rows[a][k]
                    rewards[i] = float(c.agent_rewards[a])
                    weights[i] = float(c.weights[a])
                    rewarded_rows[i] = rewarded
                    stats[f"reward/valid_{a}"].append(float(c.valid.get(a, True)))
                    stats[f"reward/length_penalty_{a}"].append(float(c.length_penalty.get(a, 0.0)))
                    if a in (quoted := c.info.get("quoted") or {}):  # whichever quote_miss rule scores it
                        stats[f"reward/quote_missed_{a}"].append(float(quoted[a][1] > 0))
                    stats[f"adrpo/weight_{a}"].append(weights[i])
                if rewarded:  # an unrewarded session has no task reward to report
                    stats["reward/task"].append(float(c.task_reward))
                stats["reward/task_rewarded"].append(float(rewarded))
                stats["reward/answers_cut"].append(float(c.info.get("answers_cut", 0) + c.info.get("verdicts_cut", 0)))
                for m in SEARCHABLE_AGENTS:
                    stats[f"adrpo/dominant_{m}"].append(float(c.dominant == m))
                stats["adrpo/dominant_none"].append(float(c.dominant is None))
            if len(results) > 1:
                for a in rows:  # a group whose G rollouts all tie has zero advantage: no gradient from it
                    got = [float(c.agent_rewards[a]) for c in results]
                    stats["reward/tied_groups"].append(float(tied(got)))
            if baselines is not None and rewarded:
                base = baselines(key)
                noop, oracle = float(base["noop"].reward), float(base["oracle"].reward)
                stats["reward/gain"] += [float(c.reward) - noop for c in results]
                if key not in seen:
                    seen.add(key)
                    stats["reward/noop"].append(noop)
                    stats["reward/oracle"].append(oracle)
                    stats["reward/oracle_gain"].append(oracle - noop)
        stats.update(attribution_stats([c for results in scored for c in results]))
        stats["adrpo/weight_mean"] = list(weights)
        stats["time/score"] = [time.perf_counter() - started]
        self.last_weights, self.last_rewards, self.last_rewarded = weights, rewards, rewarded_rows
        self.last_stat_totals = {name: (sum(v), len(v)) for name, v in stats.items() if v}
        self.last_stats = {name: total / count for name, (total, count) in self.last_stat_totals.items()}
        if self.log_metrics and log_metric is not None:
            for name, values in stats.items():
                for value in values:  # one value a row, so TRL's mean over processes weighs every row alike
                    log_metric(name, value)
        return rewards

    def _groups(self, key: str, by_agent: dict[str, list[int]]) -> list[dict[str, list[int]]]:
        """The rows scored together: the whole session (a joint rollout), or each agent alone."""
        if set(by_agent) == set(AGENTS) and len({len(v) for v in by_agent.values()}) == 1:
            return [dict(by_agent)] if self.credit == "joint" else [{a: rows} for a, rows in by_agent.items()]
        if self.whole_sessions:
            raise ValueError(f"session {key!r}: the batch holds {({a: len(v) for a, v in by_agent.items()})} "
                             f"completions per agent; ADRPO needs all of {AGENTS} with G each in one batch "
                             "(use SessionRepeatSampler)")
        return [{a: rows} for a, rows in by_agent.items()]

    def _expert(self, key: str) -> dict[str, str]:
        expert_action = getattr(self.scorer, "expert_action", None)
        if not callable(expert_action):
            raise TypeError(f"session {key!r} is not whole in this batch, and {type(self.scorer).__name__} has no "
                            "expert_action(session_key) to write the missing agents' outputs")
        return dict(expert_action(key))
