"""What ``SessionReward`` logs beside the rewards: both attribution rules' dominant memories and their
entropy, and the learnable share (no-op, oracle, gain) from a real MemoryGym-v0 scorer on a tiny world
(evidence mode: no answer model)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from membuilder.agents.constructor import OBS_CORE
from membuilder.memory.ops import AGENTS
from membuilder.reward import CandidateReward
from membuilder.training.trl_reward import SessionReward, attribution_stats, entropy_bits
from memgym_env.construction.actions import noop_action
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SessionScorer

TYPES = (*AGENTS, "none")


@pytest.fixture(scope="module")
def scorer() -> SessionScorer:
    config = ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml", reward_density=1,
                                          world_overrides={"num_users": 1, "num_periods": 2, "rounds_update": 1},
                                          questions_per_session=3)
    return SessionScorer(config, [0], 2, pick="every_period")


def _batch(scorer: SessionScorer, keys: list[str]):
    """Each session whole, G = 2: rollout 0 writes what the expert wrote, rollout 1 writes nothing."""
    rows = dict(prompts=[], completions=[], session_key=[], agent=[])
    for key in keys:
        rollouts = [scorer.expert_action(key), noop_action(scorer.observation(key)[OBS_CORE])]
        for a in AGENTS:
            for action in rollouts:
                rows["prompts"].append(None)
                rows["completions"].append(action[a])
                rows["session_key"].append(key)
                rows["agent"].append(a)
    return rows


def test_both_rules_and_the_learnable_share_are_logged_with_a_real_scorer(scorer):
    keys = scorer.session_keys()
    assert len(keys) == 2 and len({scorer.period(k) for k in keys}) == 2  # one session of each period
    logged: list[tuple[str, float]] = []
    reward = SessionReward(scorer)
    rewards = reward(**_batch(scorer, keys), log_metric=lambda name, value: logged.append((name, value)))
    stats = reward.last_stats
    for rule in ("retrieval", "evidence"):
        shares = [stats[f"attribution/{rule}/dominant_{t}"] for t in TYPES]
        assert sum(shares) == pytest.approx(1.0) and all(0.0 <= s <= 1.0 for s in shares)
        assert 0.0 <= stats[f"attribution/{rule}/entropy"] <= math.log2(len(TYPES))
        assert stats[f"attribution/{rule}/entropy"] == pytest.approx(entropy_bits(shares))
        assert [n for n, _ in logged].count(f"attribution/{rule}/entropy") == 1  # one value a step, not a row
    assert stats["attribution/retrieval/dominant_core"] == 0.0  # the retrieval rule never names Core
    assert stats["adrpo/dominant_none"] == stats["attribution/retrieval/dominant_none"]  # retrieval sets the weights

    base = {k: scorer.baselines(k) for k in keys}
    noop = [base[k]["noop"].reward for k in keys]
    oracle = [base[k]["oracle"].reward for k in keys]
    assert stats["reward/noop"] == pytest.approx(sum(noop) / 2)
    assert stats["reward/oracle"] == pytest.approx(sum(oracle) / 2)
    assert stats["reward/oracle_gain"] == pytest.approx((sum(oracle) - sum(noop)) / 2)
    # the session reward of a rollout is the mean of its agents' rewards; its gain is that minus its session's no-op
    session_reward = {(k, j): sum(rewards[8 * i + 2 * a + j] for a in range(4)) / 4
                      for i, k in enumerate(keys) for j in range(2)}
    gains = [session_reward[k, j] - base[k]["noop"].reward for k in keys for j in range(2)]
    assert stats["reward/gain"] == pytest.approx(sum(gains) / len(gains), abs=1e-12)
    # writing nothing gains nothing, and the expert's writing gains the oracle's gain (same snapshot, same scoring)
    assert [session_reward[k, 1] for k in keys] == pytest.approx(noop)
    assert [session_reward[k, 0] for k in keys] == pytest.approx(oracle)


def test_an_unrewarded_batch_logs_no_learnable_share(scorer):
    config = ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml", reward_density=1000,
                                          world_overrides={"num_users": 1, "num_periods": 2, "rounds_update": 1},
                                          questions_per_session=3)
    sparse = SessionScorer(config, [0], 1)
    reward = SessionReward(sparse)
    key = sparse.session_keys()[0]
    assert not reward.task_rewarded(key, 0)
    reward(**_batch(sparse, [key]))
    assert not any(name.startswith(("reward/noop", "reward/oracle", "reward/gain")) for name in reward.last_stats)
    assert reward.last_stats["attribution/evidence/dominant_none"] == 1.0
    assert reward.last_stats["attribution/evidence/entropy"] == 0.0


def test_a_reward_without_per_rule_dominants_logs_no_rule():
    """An older remote server's rewards carry ``dominant`` alone: nothing is made up for the rules."""
    old = CandidateReward(agent_rewards=dict.fromkeys(AGENTS, 0.5), weights=dict.fromkeys(AGENTS, 1.0),
                          task_reward=0.5, dominant="semantic")
    assert attribution_stats([old, old]) == {}
    new = CandidateReward(agent_rewards={}, weights={}, task_reward=0.0,
                          dominant_by_rule={"retrieval": "semantic", "evidence": None})
    stats = attribution_stats([new, old])  # the rollouts that name a rule make its shares
    assert stats["attribution/retrieval/dominant_semantic"] == [1.0]
    assert stats["attribution/evidence/entropy"] == [0.0]
    assert entropy_bits([0.5, 0.5]) == 1.0 and entropy_bits([0.25] * 4) == 2.0


def test_groups_whose_rollouts_all_tie_are_counted(scorer):
    keys = scorer.session_keys()
    reward = SessionReward(scorer)
    reward(**_batch(scorer, keys))
    mixed = reward.last_stats["reward/tied_groups"]
    batch = _batch(scorer, keys)
    batch["completions"] = [batch["completions"][i - i % 2] for i in range(len(batch["completions"]))]  # G copies
    reward(**batch)
    assert reward.last_stats["reward/tied_groups"] == 1.0  # identical rollouts: no group has a gradient
    assert mixed < 1.0  # the expert beside writing nothing: the groups differ


def test_misquotes_are_logged_under_either_rule_and_zeroed_under_zero(scorer):
    key = scorer.session_keys()[0]
    miss = json.dumps({"operations": [{"action": "UPDATE", "old_memory": "Nothing like this was ever written down",
                                       "new_memory": "Coffee: a french press"}]})
    expert = scorer.expert_action(key)
    rows = dict(prompts=[None] * 2, completions=[expert["semantic"], miss], session_key=[key] * 2,
                agent=["semantic"] * 2)
    reward = SessionReward(scorer)
    published = reward(**rows)
    assert reward.last_stats["reward/quote_missed_semantic"] == 0.5  # the expert quotes nothing amiss
    zeroing = SessionScorer(dataclasses.replace(scorer.config, quote_miss="zero"), [0], 2, pick="every_period")
    reward = SessionReward(zeroing)
    zeroed = reward(**rows)
    assert reward.last_stats["reward/quote_missed_semantic"] == 0.5
    assert published[1] > 0.0  # scored as the ADD it became
    assert zeroed[0] == published[0] and zeroed[1] == 0.0
