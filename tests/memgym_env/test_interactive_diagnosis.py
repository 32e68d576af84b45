"""The write / read / utilization diagnosis of interactive runs, checked on a memory that holds the
true state: the oracle's memory can lose nothing, so none of its wrong answers is a write or read
failure, whatever model answers."""

from __future__ import annotations

import pytest

from membuilder.agents.assistants import make_assistant
from memgym_env.interactive.env import parse_answer
from memgym_env.interactive.runner import RunConfig, evaluate_one
from memgym_env.world import WorldConfig, generate_world, write_world


@pytest.fixture(scope="module")
def tiny_model(tiny_chat_path):
    from membuilder.llm import load_chat_model

    return load_chat_model(tiny_chat_path)


def test_a_probe_whose_value_the_memory_states_word_for_word_needs_no_model(tiny_model):
    oracle = make_assistant("oracle", tiny_model)
    oracle.reset("u1")
    oracle.observe([], time="2021-03-01", session_id="s0", facts={"Pet": "a beagle called Max", "City": "Lisbon"})
    items = [{"question": "Which best describes the user's pet now?",
              "choices": ["a cat called Tom", "no pet", "a beagle called Max"]}]
    assert [parse_answer(o, 3) for o in oracle.probe(items, "2021-03-02")] == [2]


def test_the_oracle_has_no_write_and_no_read_failures(tiny_model, tmp_path):
    world = generate_world(WorldConfig(num_users=1, num_periods=3, num_questions=3, changes_per_period=1))
    path = tmp_path / "world.json"
    write_world(world, path)
    cfg = RunConfig(world=str(path), assistant="oracle", out=str(tmp_path / "oracle"), model="tiny", replay="world",
                    reply_tokens=4, context_tokens=256, factual_recall=False)
    results = evaluate_one(cfg, world, tiny_model, None, {})
    o = results["overall"]
    assert o["write"] == 0 and o["read"] == 0
    assert o["write"] + o["read"] + o["utilization"] == pytest.approx(1 - o["accuracy"])


def test_the_upper_bound_shows_one_choice_state_of_the_required_variables_and_is_looked_up_per_period(tiny_model):
    import json

    from memgym_env.interactive.checks import upper_bound, upper_bound_prompts, upper_bound_table

    user = generate_world(WorldConfig(num_users=1, num_periods=3, num_questions=2, changes_per_period=1))[0]
    keys, convs = upper_bound_prompts(user)
    assert keys == [(q, c) for q, question in enumerate(user.qas) for c in range(len(question.answer_choices))]
    for (q, c), conv in zip(keys, convs, strict=True):
        question = user.qas[q]
        shown = json.loads(conv[-1]["content"].split("(JSON):\n")[1].split("\n")[0])
        want = {user.info(v).title: user.info(v).text(x)
                for v, x in zip(question.required_info, question.answer_choices[c].state, strict=True)}
        assert shown == want  # only the question's variables, with that choice's values
    table = upper_bound_table(tiny_model, user)
    assert set(table) == set(keys)
    for p, period in enumerate(user.periods):
        assert upper_bound(tiny_model, user, p, table) == [table[(q, question.correct_choice(period.state))]
                                                           for q, question in enumerate(user.qas)]


def test_factual_recall_is_one_test_for_every_assistant_and_evidence_overlap_is_apart(tiny_model, embedder):
    from memgym_env.interactive.checks import evidence_overlap_flags, factual_recall_flags

    fact = {"variable": "commute", "fact": "Commute: cycling to work", "value_text": "cycling to work",
            "sessions": ["p1-s0"]}
    mb = make_assistant("membuilder", tiny_model, embedder)
    mb.reset("u1")  # the value is in the bank word for word, in an entry of another session than the revealing one
    mb.bank.apply("semantic", '{"operations": [{"action": "ADD", "memory": "Commute: cycling to work | Details: '
                  'since spring"}]}', time="2021-01-01", session="p0-s1")
    native = make_assistant("native", tiny_model)
    native.reset("u1")
    native.observe([{"role": "user", "content": "These days I am cycling to work."}], time="2021-01-01",
                   session_id="p0-s1")
    for assistant in (mb, native):
        assert factual_recall_flags(assistant, tiny_model, [fact], 256) == [True]
    assert evidence_overlap_flags(mb, [fact]) == [False]  # MemBuilder's own diagnostic: not from session p1-s0
    assert evidence_overlap_flags(native, [fact]) is None


def test_without_probes_the_questions_are_answered_alike_and_the_diagnosis_is_left_out(tiny_model, tmp_path):
    """The ladder's memory score turns the probes off: they feed the diagnosis alone, so every question gets the
    same answer, on a run whose sessions the simulator writes (not a replay)."""
    import json

    world = generate_world(WorldConfig(num_users=1, num_periods=2, num_questions=3, changes_per_period=1))
    path = tmp_path / "world.json"
    write_world(world, path)
    runs = {}
    for probes in (True, False):
        cfg = RunConfig(world=str(path), assistant="native", out=str(tmp_path / f"probes-{probes}"), model="tiny",
                        reply_tokens=4, context_tokens=256, factual_recall=False, probes=probes)
        runs[probes] = evaluate_one(cfg, world, tiny_model, None, {})
    on, off = runs[True], runs[False]
    assert off["overall"]["accuracy"] == on["overall"]["accuracy"]
    assert off["overall"]["questions"] == on["overall"]["questions"] > 0
    for p in range(3):
        evals = [json.loads((tmp_path / f"probes-{probes}" / "users" / world[0].id / f"period_{p:02d}" /
                             "evaluation.json").read_text()) for probes in (True, False)]
        assert [q["choice"] for q in evals[1]["questions"]] == [q["choice"] for q in evals[0]["questions"]]
        assert evals[0]["probes"] and not evals[1]["probes"]
    assert on["overall"]["write"] is not None
    assert off["overall"]["write"] is None and off["overall"]["read"] is None
