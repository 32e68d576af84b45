"""The held-out evaluation of a memory-writing policy (``membuilder.training.policy_eval``) on real
SmolLM2 and real MemoryGym-v0 sessions: a ``ChatModel`` generates what the trainer's own model does."""

from __future__ import annotations

import pytest
from llm_models import smollm2  # tests/ is on sys.path under pytest

from membuilder.memory.ops import AGENTS
from membuilder.training.policy_eval import evaluate_policy
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
