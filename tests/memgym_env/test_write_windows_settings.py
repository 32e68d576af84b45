"""The window a long session is written in, as each entry point takes it: refused below 1 token before any run
folder is touched, offered on both command lines, and read off a packaged policy's card by `memgym evaluate`."""

from __future__ import annotations

import pytest

from membuilder.llm.registry import TRAINED_POLICY, policy_setting
from memgym_env.benchmarks.runner import EvalConfig
from memgym_env.cli import build_parser
from memgym_env.interactive.runner import RunConfig, prepare_run
from train.ladder.settings import parse_args


def test_a_window_under_one_token_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="write_window_tokens 0"):
        RunConfig(world="w.json", assistant="membuilder", out=str(tmp_path / "r"), write_window_tokens=0)
    with pytest.raises(ValueError, match="construct-window-tokens"):
        EvalConfig(benchmark="locomo", data="d.json", out=str(tmp_path / "e"), construct_window_tokens=0)
    with pytest.raises(ValueError, match="write_window_tokens 0"):
        parse_args(["--config", "configs/train/ladder_smollm2_cpu.yaml", "--write_window_tokens", "0"])
    assert not (tmp_path / "r").exists() and not (tmp_path / "e").exists()


def test_both_command_lines_take_the_window():
    parser = build_parser()
    args = parser.parse_args(["evaluate", "--world", "w.json", "--assistant", "membuilder", "--out", "o",
                              "--write-window-tokens", "160"])
    assert args.write_window_tokens == 160
    args = parser.parse_args(["eval", "--benchmark", "locomo", "--data", "d.json", "--out", "o",
                              "--construct-window-tokens", "160"])
    assert args.construct_window_tokens == 160
    assert parse_args(["--config", "configs/train/ladder_smollm2_cpu.yaml"]).write_window_tokens == 160


def test_evaluate_writes_in_the_window_its_constructor_was_given_or_its_card_names(tmp_path):
    world = tmp_path / "world.json"
    world.write_text("{}", encoding="utf-8")
    base = {"world": str(world), "assistant": "membuilder", "out": str(tmp_path / "run")}
    card = (policy_setting(TRAINED_POLICY) or {}).get("write_window_tokens")
    # whole sessions (the published way) stay out of the options, so run folders made before still resume
    assert prepare_run(RunConfig(**base, policy_model="smollm2-135m"))["assistant_options"].get("window_tokens") is None
    assert RunConfig(**base).write_window() == card
    given = RunConfig(**{**base, "out": str(tmp_path / "run2")}, write_window_tokens=96)
    assert prepare_run(given)["assistant_options"]["window_tokens"] == 96
    assert RunConfig(**{**base, "assistant": "rag"}, write_window_tokens=96).assistant_options().get("window_tokens") is None
