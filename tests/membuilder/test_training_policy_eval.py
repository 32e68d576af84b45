"""The held-out evaluation of a memory-writing policy (``membuilder.training.policy_eval``) on real
SmolLM2 and real MemoryGym-v0 sessions: a ``ChatModel`` generates what the trainer's own model does."""

from __future__ import annotations

import json

import pytest
from llm_models import smollm2  # tests/ is on sys.path under pytest

from membuilder.memory.ops import AGENTS
from membuilder.training.policy_eval import evaluate_policy, score_outputs
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SessionScorer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scorers():
    config = ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml", answer_mode="evidence")
    return {"evidence": SessionScorer(config, [8], 2)}


def test_a_chat_model_evaluates_as_the_causal_lm_does(scorers):
    chat = smollm2("float32")  # batch-invariant, so both paths must give the same text
    kw = dict(max_new_tokens=24, max_prompt_tokens=384)
    direct = evaluate_policy(chat.model, chat.tokenizer, scorers, batch_size=3, **kw)
    through_chat = evaluate_policy(chat, chat.tokenizer, scorers, **kw)
    assert direct["sessions"] == through_chat["sessions"] == 2
    for key in ("outputs", "valid_rate", "cut_rate", "session_rewards", "reward"):
        assert direct[key] == through_chat[key], key
    assert set(direct["cut_rate"]) == set(AGENTS)
    # 24 tokens hold no memory JSON the base model would write: some outputs are cut, and counted
    assert 0 < sum(direct["cut_rate"].values())


def test_the_evaluation_reports_what_writing_can_add_per_scorer_and_period():
    """A scorer with baselines adds the no-op and oracle rewards and the gains; with periods, a breakdown."""
    config = ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml", answer_mode="evidence",
                                          world_overrides={"num_users": 1, "num_periods": 2, "rounds_update": 1},
                                          questions_per_session=3)
    scorer = SessionScorer(config, [0], 2, pick="every_period")
    keys = scorer.session_keys()
    chat = smollm2()
    res = evaluate_policy(chat, chat.tokenizer, {"evidence": scorer}, max_new_tokens=8, max_prompt_tokens=384)
    noop = [scorer.baselines(k)["noop"].reward for k in keys]
    oracle = [scorer.baselines(k)["oracle"].reward for k in keys]
    assert res["session_noop"]["evidence"] == noop and res["session_oracle"]["evidence"] == oracle
    assert res["noop_reward"]["evidence"] == pytest.approx(sum(noop) / 2)
    assert res["oracle_reward"]["evidence"] == pytest.approx(sum(oracle) / 2)
    assert res["gain"]["evidence"] == pytest.approx(res["reward"]["evidence"] - res["noop_reward"]["evidence"])
    assert res["oracle_gain"]["evidence"] == pytest.approx(res["oracle_reward"]["evidence"] - res["noop_reward"]["evidence"])
    per = res["per_period"]["evidence"]
    assert sorted(per) == sorted(str(scorer.period(k)) for k in keys) and len(per) == 2  # one session of each
    for k, r, z, o in zip(keys, res["session_rewards"]["evidence"], noop, oracle, strict=True):
        assert per[str(scorer.period(k))] == {"sessions": 1, "reward": r, "noop": z, "oracle": o}
    assert set(res) >= {"valid_rate", "cut_rate", "reward", "task_reward", "session_rewards", "session_keys"}


def test_the_evaluation_counts_edits_that_missed_the_memory_they_quote():
    """The expert's edits all find what they quote; an UPDATE of an entry that is not there is counted missed."""
    config = ConstructionConfig.from_yaml("configs/env/construction_cpu_change_varied.yaml",
                                          world_overrides={"num_users": 1, "num_periods": 2, "rounds_update": 1})
    scorer = SessionScorer(config, [0], 3, pick="every_period")
    keys = scorer.session_keys()
    expert = [scorer.expert_action(k) for k in keys]
    slots = [(k, a) for k in keys for a in AGENTS]
    res = score_outputs({"evidence": scorer}, keys, slots, [e[a] for e in expert for a in AGENTS], [False] * len(slots))
    assert sum(q["quoted"] for q in res["quoted"].values()) > 0  # the world changes values after period 0
    assert all(q["missing"] == 0 for q in res["quoted"].values())
    invented = json.dumps({"operations": [{"action": "UPDATE", "old_memory": "Pet: a parrot named Zorro | Details: x",
                                           "new_memory": "Pet: a cat"}]})
    texts = [invented if a == "semantic" else e[a] for e in expert for a in AGENTS]
    missed = score_outputs({"evidence": scorer}, keys, slots, texts, [False] * len(slots))["quoted"]["semantic"]
    assert missed == {"quoted": len(keys), "missing": len(keys)}
