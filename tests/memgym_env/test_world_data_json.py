"""The official data.json format: the published example loads, validates and round-trips."""

import json
from pathlib import Path

import pytest

from memgym_env.world.data_json import dumps_world, read_world, user_from_dict, world_from_list, write_world
from memgym_env.world.types import WorldError
from memgym_env.world.validate import validate_world, world_issues

EXAMPLE = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "amemgym" / "amemgym_format_example.json"


def test_example_loads_into_typed_records():
    world = read_world(EXAMPLE)
    user = world[0]
    assert user.user_profile.name == "Maya Lindqvist"
    assert user.state_schema["diet_type"] == ["omnivore", "vegetarian", "vegan"]
    assert [len(p.sessions) for p in user.periods] == [2, 2, 2]
    assert user.periods[1].updates["diet_type"].old == "omnivore"
    assert user.qas[0].required_info == ["diet_type", "home_city_size"]
    assert user.qas[0].correct_choice(user.periods[2].state) == 2


def test_example_validates():
    assert world_issues(read_world(EXAMPLE)) == []


def test_example_round_trips_byte_for_byte():
    raw = EXAMPLE.read_text(encoding="utf-8")
    assert dumps_world(read_world(EXAMPLE)) == raw


def test_normalising_write_is_stable(tmp_path):
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    data[0]["custom_note"] = "kept"  # unknown keys survive
    data[0]["periods"][1]["sessions"][0]["messages"] = [{"role": "user", "content": "hi", "lang": "en"}]
    del data[0]["user_profile"]["complementary_info"]  # an optional field may be missing
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    write_world(world_from_list(data), first)
    write_world(read_world(first), second)
    assert first.read_bytes() == second.read_bytes()
    again = json.loads(second.read_text(encoding="utf-8"))
    assert again[0]["custom_note"] == "kept"
    assert again[0]["periods"][1]["sessions"][0]["messages"][0]["lang"] == "en"


def test_bad_field_type_names_user_period_session_and_field():
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    data[0]["periods"][1]["sessions"][1]["query"] = 42
    with pytest.raises(WorldError, match=r"user 0 \(id 0b7c2f1e.*\), period 1, session 1: field 'query' must be str"):
        world_from_list(data, source="bad.json")


def test_inconsistent_state_is_reported_with_its_place():
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    data[0]["periods"][2]["sessions"][0]["exposed_states"]["home_city_size"] = "small_town"
    issues = world_issues(world_from_list(data))
    assert any("period 2, session 0, field 'exposed_states'" in i and "small_town" in i for i in issues)
    with pytest.raises(WorldError):
        validate_world(world_from_list(data))


def test_unknown_variable_in_question_is_reported():
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    data[0]["qas"][1]["required_info"] = ["coffee_brewing_method", "shoe_size"]
    issues = world_issues(world_from_list(data))
    assert any("qas[1]" in i and "shoe_size" in i for i in issues)


def test_not_a_list_is_a_clear_error():
    with pytest.raises(WorldError, match="list of users"):
        world_from_list({"users": []}, source="x.json")


def test_missing_required_field():
    with pytest.raises(WorldError, match="missing field 'state_schema'"):
        user_from_dict({"id": "u", "user_profile": {"name": "A"}, "periods": [], "qas": []})
