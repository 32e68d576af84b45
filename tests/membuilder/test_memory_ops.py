"""Parsing the four agents' JSON operations (protocols §1)."""

from __future__ import annotations

import json

import pytest
from fuzz_corpus import corpus
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from membuilder.memory.ops import (
    AGENTS,
    Add,
    CoreAppend,
    CoreReplace,
    CoreRewrite,
    Merge,
    Skip,
    Update,
    parse,
    render_ops,
    written_text,
)


def test_core_operations_parse_to_typed_ops():
    assert parse("core", '{"operation": "APPEND", "content": "Likes tea"}').ops == [CoreAppend("Likes tea")]
    assert parse("core", '{"operation": "replace", "old_text": "tea", "new_text": "coffee"}').ops == [
        CoreReplace("tea", "coffee")
    ]
    assert parse("core", '{"operation": "REWRITE", "content": "Name: Ana"}').ops == [CoreRewrite("Name: Ana")]


def test_each_store_agent_accepts_exactly_its_actions():
    ops = {
        "ADD": {"action": "ADD", "memory": "m"},
        "UPDATE": {"action": "UPDATE", "old_memory": "a", "new_memory": "b"},
        "MERGE": {"action": "MERGE", "old_memories": ["a", "b", "c"], "new_memory": "abc"},
        "SKIP": {"action": "SKIP", "reason": "general knowledge"},
    }
    allowed = {"episodic": {"ADD", "UPDATE", "MERGE"}, "semantic": {"ADD", "UPDATE", "SKIP"}, "procedural": {"ADD", "UPDATE"}}
    for agent, names in allowed.items():
        for name, op in ops.items():
            parsed = parse(agent, json.dumps({"operations": [op]}))
            assert parsed.valid is (name in names), (agent, name, parsed.errors)
            if not parsed.valid:
                assert f"not allowed for {agent}" in parsed.errors[0]


def test_merge_and_skip_carry_their_fields():
    p = parse("episodic", '{"operations": [{"action": "MERGE", "old_memories": ["x", "y", "z"], "new_memory": "xyz"}]}')
    assert p.ops == [Merge(("x", "y", "z"), "xyz")]
    assert parse("semantic", '{"operations": [{"action": "SKIP", "reason": "common fact"}]}').ops == [Skip("common fact")]


def test_empty_operation_list_is_a_valid_no_op():
    p = parse("procedural", '{"operations": []}')
    assert p.valid and p.ops == []


def test_think_blocks_and_code_fences_are_stripped():
    text = '<think>maybe {"operation": "REWRITE"}</think>\nHere:\n```json\n{"operation": "APPEND", "content": "x"}\n```'
    p = parse("core", text)
    assert p.valid and p.ops == [CoreAppend("x")]


def test_first_balanced_object_wins_over_later_ones_and_prose():
    text = 'Sure! {"operations": [{"action": "ADD", "memory": "first"}]} and {"operations": []}'
    assert parse("semantic", text).ops == [Add("first")]
    # Braces inside strings do not confuse the scan.
    assert parse("semantic", '{"operations": [{"action": "ADD", "memory": "a } b { c"}]}').ops == [Add("a } b { c")]


@pytest.mark.parametrize(
    "agent,text,reason",
    [
        ("core", "no json here", "no JSON object"),
        ("core", '{"operation": "APPEND"}', "needs 'content'"),
        ("core", '{"operation": "DELETE", "content": "x"}', "not allowed"),
        ("episodic", '{"operations": {"action": "ADD"}}', "expected"),
        ("episodic", '{"operations": [{"action": "ADD", "memory": 42}]}', "must be a string"),
        ("episodic", '{"operations": [{"action": "MERGE", "old_memories": "a", "new_memory": "b"}]}', "non-empty list"),
        ("semantic", '{"operations": [{"action": "ADD", "memory": "   "}]}', "is empty"),
        ("procedural", '{"operations": [{"action": "UPDATE", "new_memory": "b"}]}', "needs 'old_memory'"),
        ("semantic", '{"operations": [{"action": "ADD", "memory": "ok"}, "junk"]}', "must be an object"),
        # a garbled UPDATE read as an ADD would store the replaced value as current (RL found this form)
        ("procedural", '{"operations": [{"action": "ADD", "memory": "old", "old_memory": "new"}]}',
         "'old_memory' (a field of UPDATE)"),
        ("procedural", '{"operations": [{"action": "ADD", "memory": "old", "memory_changed": "new"}]}',
         "ADD takes only 'memory'; it also carries 'memory_changed'"),
        ("semantic", '{"operations": [{"action": "UPDATE", "old_memory": "a", "new_memory": "b", "memory": "c"}]}',
         "(a field of ADD)"),
        ("core", '{"operation": "APPEND", "content": "x", "old_text": "y"}', "(a field of REPLACE)"),
    ],
)
def test_faults_make_the_output_invalid_with_a_reason(agent, text, reason):
    p = parse(agent, text)
    assert not p.valid
    assert any(reason in e for e in p.errors), p.errors


def test_huge_field_is_cut_with_a_warning():
    p = parse("semantic", json.dumps({"operations": [{"action": "ADD", "memory": "x" * 50_000}]}))
    assert p.valid and len(p.ops[0].memory) == 20_000
    assert "cut" in p.warnings[0]


def test_unknown_agent_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown agent"):
        parse("working", "{}")


def test_render_ops_is_the_inverse_of_parse():
    cases = {
        "core": [CoreReplace("a", "b")],
        "episodic": [Add("2023-05-08: x | Details: y"), Update("old", "new"), Merge(("a", "b"), "ab")],
        "semantic": [Skip("known"), Add("Tea: green")],
        "procedural": [],
    }
    for agent, ops in cases.items():
        assert parse(agent, render_ops(agent, ops)).ops == ops


def test_written_text_collects_new_text_only():
    ops = [Add("one"), Update("old", "two"), Skip("s"), Merge(("a",), "three")]
    assert written_text(ops) == "one\ntwo\nthree"


# ---- fuzz: parse never raises --------------------------------------------------------------
_json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=40))
_json_value = st.recursive(_json_scalar, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
                           max_leaves=6)
_action = st.sampled_from(["ADD", "UPDATE", "MERGE", "SKIP", "APPEND", "REPLACE", "REWRITE", "add", "DELETE", ""])
_field = st.sampled_from(["memory", "old_memory", "new_memory", "old_memories", "reason", "content", "old_text", "new_text"])
_op_obj = st.fixed_dictionaries({"action": _action}, optional={"operation": _action}).flatmap(
    lambda base: st.dictionaries(_field, _json_value | st.text(max_size=300), max_size=3).map(lambda d: {**base, **d})
)
_plausible = st.one_of(
    st.lists(_op_obj, max_size=4).map(lambda ops: json.dumps({"operations": ops})),
    _op_obj.map(lambda o: json.dumps({"operation": o.get("action"), **{k: v for k, v in o.items() if k != "action"}})),
)
model_output = st.one_of(
    st.text(max_size=400),
    _plausible,
    _plausible.flatmap(lambda s: st.integers(0, len(s)).map(lambda n: s[:n])),  # cut mid-generation
    _plausible.map(lambda s: f"<think>{s[:20]}</think>```json\n{s}\n```"),
    st.just("{" * 5000 + "}" * 10),
    st.just('{"operations": ' + "[" * 3000 + "]" * 3000 + "}"),
    _json_value.map(lambda v: json.dumps(v)),
    st.binary(max_size=50).map(lambda b: b.decode("latin-1")),
    st.none(),
    st.integers(),
)


@settings(max_examples=2_000, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(text=model_output)
def test_parse_never_raises_on_generated_text(text):
    for agent in AGENTS:
        p = parse(agent, text)
        assert p.valid == (not p.errors)


@pytest.mark.parametrize("agent", AGENTS)
def test_parse_never_raises_on_10k_mutated_outputs(agent):
    texts = corpus(agent)
    results = [parse(agent, t) for t in texts]
    valid = sum(p.valid for p in results)
    # The corpus must exercise both sides of the validity gate to mean anything.
    assert 0.05 * len(texts) < valid < 0.9 * len(texts)
    assert all(p.errors for p in results if not p.valid)
