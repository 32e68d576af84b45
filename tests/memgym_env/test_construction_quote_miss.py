"""quote_miss: an edit that quotes memory which is not there costs the agent that wrote it (zero) or only the
questions it spoils (add, the published reward), on the same memory either way."""
from __future__ import annotations

import json

import pytest

from membuilder.memory import EmbeddingCache, MemoryBank
from membuilder.memory.ops import AGENTS
from membuilder.reward import QUOTE_MISS_RULES, candidate_reward
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import ScoringModels, score_session
from memgym_env.conversation import Message, QAItem, Session
from memgym_env.serving.wire import reward_from_json, reward_to_json

GOLD = "pour-over with a gooseneck kettle"
STATES = {"coffee": {"history": ["espresso", "pour_over"],
                     "phrasings": {"espresso": ["an espresso machine"], "pour_over": [GOLD]}}}
QUESTION = QAItem(id="u:s1:q0", question="How do I make my coffee?", answer=GOLD, session="s1",
                  meta={"variables": ["coffee"], "states": STATES})
SESSION = Session(id="s1", time="2024-03-01 10:00", messages=[
    Message(role="user", content=f"I gave up the espresso machine; now it is {GOLD}.")])
CORE = json.dumps({"operation": "REPLACE", "old_text": "an espresso machine (since 2024-01-01)",
                   "new_text": f"{GOLD} (since 2024-03-01)"})
NOTHING = json.dumps({"operations": []})


def semantic(action: str, **fields) -> str:
    return json.dumps({"operations": [{"action": action, **fields}]})


HIT = semantic("UPDATE", old_memory="Coffee: an espresso machine", new_memory=f"Coffee: {GOLD}")
# The writer copies the new value into the quote: no entry says it, so the UPDATE lands as a new entry.
MISS = semantic("UPDATE", old_memory=f"Coffee: {GOLD} since the kettle arrived last week",
                new_memory=f"Coffee: {GOLD}")
ADD = semantic("ADD", memory=f"Coffee: {GOLD}")


@pytest.fixture
def snapshot(embedder) -> MemoryBank:
    bank = MemoryBank(cache=EmbeddingCache(embedder))
    bank.apply("core", json.dumps({"operation": "APPEND", "content": "Coffee: an espresso machine (since 2024-01-01)"}))
    bank.apply("semantic", semantic("ADD", memory="Coffee: an espresso machine"))
    return bank


def rewards(snapshot: MemoryBank, semantic_outputs: list[str], rule: str):
    cands = [{"core": CORE, "episodic": NOTHING, "semantic": s, "procedural": NOTHING} for s in semantic_outputs]
    scored = score_session(snapshot, SESSION, [QUESTION], cands, mode="stale", models=ScoringModels(),
                           live_view=True, quote_miss=rule)
    return [s.reward for s in scored], [s.applied for s in scored]


def test_a_missed_quote_lands_as_an_add_and_zero_tells_only_its_agent(snapshot):
    (hit, miss, add), applied = rewards(snapshot, [HIT, MISS, ADD], "add")
    assert [a["semantic"].quoted_missing for a in applied] == [0, 1, 0]
    assert hit.task_reward == 1.0
    # under the published rule the misquote scores as the ADD it became: the stale entry stays live beside it
    assert miss.agent_rewards == add.agent_rewards and miss.task_reward == 0.0
    assert not any(miss.misquoted.values())

    (z_hit, z_miss, z_add), _ = rewards(snapshot, [HIT, MISS, ADD], "zero")
    assert z_hit.agent_rewards == hit.agent_rewards and z_add.agent_rewards == add.agent_rewards
    assert z_miss.misquoted == {a: a == "semantic" for a in AGENTS}
    assert z_miss.valid["semantic"]  # the JSON was fine: validity stays the parse check
    assert z_miss.task_reward == miss.task_reward  # the same memory was scored


def test_zero_separates_a_misquote_from_an_add_when_the_questions_do_not(snapshot):
    # The Core REPLACE alone carries the answer in evidence mode, so the questions cannot tell the three apart.
    cands = [{"core": CORE, "episodic": NOTHING, "semantic": s, "procedural": NOTHING} for s in (HIT, MISS, ADD)]
    add_rule = [s.reward for s in score_session(snapshot, SESSION, [QUESTION], cands, mode="evidence",
                                                models=ScoringModels(), quote_miss="add")]
    zero_rule = [s.reward for s in score_session(snapshot, SESSION, [QUESTION], cands, mode="evidence",
                                                 models=ScoringModels(), quote_miss="zero")]
    assert len({r.agent_rewards["semantic"] for r in add_rule}) == 1 and add_rule[0].agent_rewards["semantic"] > 0
    assert [r.agent_rewards["semantic"] for r in zero_rule] == [add_rule[0].agent_rewards["semantic"], 0.0,
                                                                add_rule[0].agent_rewards["semantic"]]


def test_a_core_replace_that_finds_nothing_is_a_misquote():
    quotes = {"core": 1, "episodic": 0, "semantic": 0, "procedural": 0}
    r = candidate_reward(dict.fromkeys(AGENTS, True), dict.fromkeys(AGENTS, 10), dict.fromkeys(AGENTS, 10),
                         task_reward=0.5, quote_misses=quotes, quote_miss="zero")
    assert r.agent_rewards == {"core": 0.0, "episodic": 0.5, "semantic": 0.5, "procedural": 0.5}
    assert r.misquoted["core"]
    kept = candidate_reward(dict.fromkeys(AGENTS, True), dict.fromkeys(AGENTS, 10), dict.fromkeys(AGENTS, 10),
                            task_reward=0.5, quote_misses=quotes)
    assert kept.agent_rewards == dict.fromkeys(AGENTS, 0.5) and not any(kept.misquoted.values())


def test_the_rule_is_checked_and_travels_over_the_wire():
    assert QUOTE_MISS_RULES == ("add", "zero")
    with pytest.raises(ValueError, match="quote_miss 'strict'; expected one of"):
        ConstructionConfig(quote_miss="strict")
    with pytest.raises(ValueError, match="quote_miss rule 'strict'"):
        candidate_reward(dict.fromkeys(AGENTS, True), {}, {}, task_reward=1.0, quote_miss="strict")
    r = candidate_reward(dict.fromkeys(AGENTS, True), {}, {}, task_reward=1.0,
                         quote_misses={"semantic": 2}, quote_miss="zero")
    back = reward_from_json(json.loads(json.dumps(reward_to_json(r))))
    assert back.misquoted == r.misquoted and back.agent_rewards == r.agent_rewards
    old_server = {k: v for k, v in reward_to_json(r).items() if k != "misquoted"}
    assert reward_from_json(old_server).misquoted == {}
    with pytest.raises(ValueError, match=r"reward.misquoted: expected true or false"):
        reward_from_json({**reward_to_json(r), "misquoted": {"semantic": "yes"}})
