"""MemoryGym-v0's stale-aware mode and evidence attribution, on hand-built banks; the published mode unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from membuilder.memory import EmbeddingCache, MemoryBank
from membuilder.reward import evidence_dominant
from memgym_env.construction.actions import noop_action, replaces_as_appends, updates_as_adds
from memgym_env.construction.answers import answer_questions
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import ScoringModels, SessionScorer, retrieve_for_questions
from memgym_env.construction.state_values import VariableValues, mentions, question_variables, stale_ok
from memgym_env.conversation import QAItem

COFFEE = {"history": ["espresso", "pour_over"],
          "phrasings": {"espresso": ["an espresso machine"], "pour_over": ["pour-over with a gooseneck kettle"],
                        "french_press": ["a french press"]}}
GOLD = "pour-over with a gooseneck kettle"


def question(states=None, answer=GOLD) -> QAItem:
    return QAItem(id="u:s1:q0", question="How do I make my coffee?", answer=answer, session="s1",
                  meta={"variables": list(states or {}), "states": states or {}})


def core(op: str, **fields) -> str:
    return json.dumps({"operation": op, **fields})


def entries(*ops) -> str:
    return json.dumps({"operations": list(ops)})


@pytest.fixture
def cache(embedder):
    return EmbeddingCache(embedder)


def before(cache) -> MemoryBank:
    """The memory before the session that changes the coffee method."""
    bank = MemoryBank(cache=cache)
    bank.apply("core", core("APPEND", content="Coffee: an espresso machine (since 2024-01-01)\nCity: a small town"))
    bank.apply("semantic", entries({"action": "ADD", "memory": "Coffee: an espresso machine"}))
    return bank


def correct(bank: MemoryBank, item: QAItem, mode: str, live: bool) -> bool:
    hits = retrieve_for_questions([bank], [item], 10, live_only=live)
    return answer_questions([bank], hits, [item], mode, ScoringModels())[0][0]["correct"]


def test_matcher_reads_history_cues_and_longest_phrasing():
    var = question_variables(question({"coffee": COFFEE}))[0]
    assert var.current == "pour_over" and var.superseded == {"espresso"}
    assert mentions("Coffee: pour-over with a gooseneck kettle (since 2024-03-01)", var) == [("pour_over", True)]
    assert mentions("Coffee: pour-over with a gooseneck kettle | Details: previously an espresso machine.", var) == \
        [("pour_over", True), ("espresso", False)]
    assert mentions("changed from an espresso machine to pour-over with a gooseneck kettle", var) == \
        [("espresso", False), ("pour_over", True)]
    assert mentions("I used to own an espresso machine; now pour-over with a gooseneck kettle", var) == \
        [("espresso", False), ("pour_over", True)]
    lang = VariableValues("lang", ("french", "german"), {"french": ("french",), "german": ("german",)},
                          masks=("a french press",))
    assert mentions("Coffee: a french press; Language: german, previously french", lang) == \
        [("german", True), ("french", False)]  # the coffee maker is not a claim about the language
    assert stale_ok([lang], [("core", "Coffee: a french press\nLanguage: german")])


def test_core_append_beside_the_old_value_fails_and_replace_passes(cache):
    item = question({"coffee": COFFEE})
    update = entries({"action": "UPDATE", "old_memory": "Coffee: an espresso machine",
                      "new_memory": f"Coffee: {GOLD} | previously an espresso machine"})
    appended, replaced = before(cache), before(cache)
    for bank, core_out in ((appended, core("APPEND", content=f"Coffee: {GOLD} (since 2024-03-01)")),
                           (replaced, core("REPLACE", old_text="an espresso machine (since 2024-01-01)",
                                           new_text=f"{GOLD} (since 2024-03-01)"))):
        bank.apply("core", core_out)
        bank.apply("semantic", update)
    assert correct(appended, item, "evidence", live=False)  # the published mode cannot tell them apart
    assert correct(replaced, item, "evidence", live=False)
    assert not correct(appended, item, "stale", live=True)
    assert correct(replaced, item, "stale", live=True)


def test_entry_add_beside_a_live_old_entry_fails_and_update_passes(cache):
    item = question({"coffee": COFFEE})
    replace = core("REPLACE", old_text="an espresso machine (since 2024-01-01)", new_text=f"{GOLD} (since 2024-03-01)")
    added, updated = before(cache), before(cache)
    added.apply("semantic", entries({"action": "ADD", "memory": f"Coffee: {GOLD}"}))
    updated.apply("semantic", entries({"action": "UPDATE", "old_memory": "Coffee: an espresso machine",
                                       "new_memory": f"Coffee: {GOLD}"}))
    for bank in (added, updated):
        bank.apply("core", replace)
        assert correct(bank, item, "evidence", live=False)
    assert not correct(added, item, "stale", live=True)
    assert correct(updated, item, "stale", live=True)
    # shown as history (answer_view all), the replaced entry is not a claim about now
    assert correct(updated, item, "stale", live=False)
    # an episodic entry naming the old value is a dated event, never a stale claim
    updated.apply("episodic", entries({"action": "ADD", "memory": "2024-03-01: bought a kettle; coffee was an "
                                                                  "espresso machine, now pour-over"}))
    assert correct(updated, item, "stale", live=True)


def test_unchanged_variables_behave_as_evidence_mode(cache):
    states = {"coffee": {**COFFEE, "history": ["pour_over"]}}
    bank = before(cache)
    bank.apply("core", core("APPEND", content=f"Coffee: {GOLD}"))
    for item in (question(states), question(states, answer="a small town"), question(None)):
        for live in (False, True):
            assert correct(bank, item, "stale", live) == correct(bank, item, "evidence", live)
    assert not stale_ok(question_variables(question({"coffee": COFFEE})), [("core", "Coffee: an espresso machine")])


def test_evidence_attribution_names_the_memory_that_held_the_answer(cache):
    item = question({"coffee": COFFEE})
    bank = before(cache)
    bank.apply("core", core("REPLACE", old_text="an espresso machine (since 2024-01-01)", new_text=GOLD))
    hits = retrieve_for_questions([bank], [item], 10, live_only=True)
    row = answer_questions([bank], hits, [item], "stale", ScoringModels())[0][0]
    assert row["evidence_type"] == "core" and row["evidence_in"] == ["core"]
    bank.apply("procedural", entries({"action": "ADD", "memory": f"Coffee: {GOLD} | Steps: 1. Boil water."}))
    hits = retrieve_for_questions([bank], [item], 10, live_only=True)
    row = answer_questions([bank], hits, [item], "stale", ScoringModels())[0][0]
    assert row["evidence_type"] == "procedural" and row["evidence_in"] == ["core", "procedural"]
    assert evidence_dominant(["core", "core", "semantic"]) == "core"
    assert evidence_dominant(["core", "semantic", None]) is None  # no majority: every weight 1
    assert evidence_dominant([]) is None


def test_published_mode_gives_the_rewards_it_gave_before_the_stale_mode():
    pinned = json.loads((Path(__file__).parent / "data" / "published_rewards.json").read_text())["rewards"]
    config = ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml",
                                          world_overrides={"num_users": 2, "rounds_update": 1, "num_periods": 3})
    assert config.reward_setting == "published"
    scorer = SessionScorer(config, users=[0, 1])
    assert sorted(scorer.session_keys()) == sorted(pinned)
    for key in scorer.session_keys():
        expert = scorer.expert_action(key)
        cands = [expert, updates_as_adds(replaces_as_appends(expert)), noop_action(scorer.core_before(key))]
        got = [{"agent_rewards": r.agent_rewards, "weights": r.weights, "dominant": r.dominant,
                "task_reward": r.task_reward} for r in scorer.score(key, cands)]
        assert got == pinned[key], key
