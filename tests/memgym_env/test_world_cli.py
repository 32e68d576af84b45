"""`memgym world generate | show | validate | expert`, run through the command module."""

import argparse
import json

import pytest

from memgym_env.commands import world as world_command


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="memgym world")
    world_command.add_arguments(parser)
    return world_command.run(parser.parse_args(list(argv)))


@pytest.fixture(scope="module")
def world_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("world") / "world.json"
    assert run("generate", "--config", "configs/env/base.yaml", "--seed", "42", "--set", "num_users=2",
               "--set", "num_periods=3", "--out", str(path)) == 0
    return path


def test_generate_is_deterministic(world_file, tmp_path):
    again = tmp_path / "again.json"
    run("generate", "--config", "configs/env/base.yaml", "--seed", "42", "--set", "num_users=2",
        "--set", "num_periods=3", "--out", str(again))
    assert again.read_bytes() == world_file.read_bytes()


def test_validate_accepts_a_generated_world(world_file, capsys):
    assert run("validate", str(world_file)) == 0
    assert "2 users" in capsys.readouterr().out


def test_validate_lists_faults_and_fails(world_file, tmp_path, capsys):
    data = json.loads(world_file.read_text())
    data[1]["periods"][2]["state"].popitem()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert run("validate", str(bad)) == 1
    assert "period 2, field 'state'" in capsys.readouterr().out


def test_show_reads_like_a_timeline(world_file, capsys):
    assert run("show", str(world_file), "--user", "0") == 0
    out = capsys.readouterr().out
    assert "== Period 0: where things stand on 2020-10-01 ==" in out
    assert "== Period 1: 2020-10-01 to 2021-01-01 ==" in out and " -> " in out
    assert "== Questions" in out


def test_show_unknown_user_is_a_clear_error(world_file):
    with pytest.raises(ValueError, match="no user 9"):
        run("show", str(world_file), "--user", "9")


def test_expert_writes_one_line_per_session(world_file, tmp_path):
    out = tmp_path / "expert.jsonl"
    assert run("expert", str(world_file), "--user", "0", "--out", str(out)) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines and set(lines[0]["outputs"]) == {"core", "episodic", "semantic", "procedural"}


def test_validate_calls_an_empty_world_invalid(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    assert run("validate", str(empty)) == 1
    assert "the world has no users" in capsys.readouterr().out


def test_validate_lists_every_type_fault_of_every_user(world_file, tmp_path, capsys):
    data = json.loads(world_file.read_text())
    data[0]["user_profile"]["name"] = 5
    data[0]["periods"][0]["sessions"][0]["query"] = []
    data[1]["periods"] = "x"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert run("validate", str(bad)) == 1
    out = capsys.readouterr().out
    assert "user_profile: field 'name' must be str, got int" in out
    assert "period 0, session 0: field 'query' must be str, got list" in out
    assert "field 'periods' must be list, got str" in out
    assert out.strip().endswith("3 issues")
