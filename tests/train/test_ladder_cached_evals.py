"""What the ladder reads off its cached held-out evaluations without generating: one cached under an older parse
rule scored again, and a stage's outputs swapped into another's one agent at a time (``train.ladder.agent_swap``)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from membuilder.memory.ops import AGENTS, OPS_SCHEMA, parse  # noqa: E402
from membuilder.training.policy_eval import score_outputs  # noqa: E402
from train.ladder import agent_swap  # noqa: E402
from train.ladder.evaluator import Evaluator, policy_weights  # noqa: E402
from train.ladder.settings import parse_args  # noqa: E402
from train.ladder.work_folder import check_work_dir, rl_only, work_settings  # noqa: E402

WORLD = {"num_users": 4, "num_periods": 1, "rounds_update": 1, "seed": 11}
# a Procedural ADD that also names the entry it meant to replace: parse rule 1 read it as an ADD, rule 2 rejects
# it as a garbled UPDATE
GARBLED = '{"operations": [{"action": "ADD", "memory": "Commute: cycling", "old_memory": "Commute: the bus"}]}'


def _argv(tmp_path) -> list[str]:
    return ["--config", "configs/train/ladder_smollm2_cpu.yaml", "--env_overrides",
            json.dumps({"world_overrides": WORLD}), "--train_users", "0-1", "--held_out_users", "3",
            "--eval_sessions_per_user", "2", "--eval_engine", "transformers",
            "--work_dir", str(tmp_path / "work"), "--results_dir", str(tmp_path / "results")]


def _cache(evaluate: Evaluator, name: str, outputs: dict) -> dict:
    """An evaluation of ``outputs`` cached under ``name`` as the ladder writes it, under today's rule."""
    keys = evaluate.keys
    slots = [(k, agent) for k in keys for agent in AGENTS]
    res = score_outputs(evaluate.scorers, keys, slots, [outputs[k][g] for k, g in slots], [False] * len(slots))
    res.update(session_pick=evaluate.a.eval_session_pick, reward_mode=evaluate.reward_mode)
    evaluate.cache(name).parent.mkdir(parents=True, exist_ok=True)
    evaluate.cache(name).write_text(json.dumps(res))
    return res


def _never():
    raise AssertionError("generated: the cache should have been read")


def _memory_cache(evaluate: Evaluator, name: str, **fields) -> dict:
    """A memory score cached as the ladder writes one where the interactive evaluation is off."""
    memory = {"memory_score": None, "memory_score_ci": None, "memory_settings": evaluate.memory_settings(),
              "engine_dtype": evaluate.engine_dtype(), "ops_schema": OPS_SCHEMA, **fields}
    evaluate.cache(f"{name}-memory").write_text(json.dumps(memory))
    return memory


def test_an_evaluation_cached_under_the_old_parse_rule_is_rescored_and_kept(tmp_path):
    evaluate = Evaluator(parse_args(_argv(tmp_path)), tmp_path / "work")
    a = evaluate.a
    scorer = evaluate.scorers["evidence"]
    keys = evaluate.keys
    garbled = GARBLED
    outputs = {k: {**scorer.expert_action(k), "procedural": garbled} for k in keys}
    slots = [(k, agent) for k in keys for agent in AGENTS]
    today = score_outputs(evaluate.scorers, keys, slots, [outputs[k][g] for k, g in slots], [False] * len(slots))
    assert today["valid_rate"]["procedural"] == 0.0 and not parse("procedural", garbled).valid
    old = {**today, "valid_rate": {**today["valid_rate"], "procedural": 1.0},
           "session_rewards": {"evidence": [0.123] * len(keys)}, "reward": {"evidence": 0.123},
           "cut_rate": {g: 0.5 for g in AGENTS}, "session_pick": a.eval_session_pick,
           "reward_mode": evaluate.reward_mode, "eval_seconds": 9.0}
    del old["ops_schema"]  # cached before the rule was recorded: rule 1
    cache = evaluate.cache("sft")
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps(old))

    res = evaluate.held_out("SFT", "sft", _never, lambda r: True)
    assert res["ops_schema"] == OPS_SCHEMA and res["rescored_from_schema"] == 1
    assert res["valid_rate"] == today["valid_rate"] and res["session_rewards"] == today["session_rewards"]
    assert res["reward"] == today["reward"] != {"evidence": 0.123}
    # what the text cannot tell again is kept: the share cut at the limit and how long the generation took
    assert res["cut_rate"] == old["cut_rate"] and res["eval_seconds"] == 9.0
    assert json.loads(cache.read_text())["ops_schema"] == OPS_SCHEMA
    assert evaluate.held_out("SFT", "sft", _never, lambda r: True) == json.loads(cache.read_text())


def test_agent_swap_names_the_agent_whose_writing_moved_the_reward(tmp_path):
    evaluate = Evaluator(parse_args(_argv(tmp_path)), tmp_path / "work")
    scorer, keys = evaluate.scorers["evidence"], evaluate.keys
    expert = {k: scorer.expert_action(k) for k in keys}
    ref = _cache(evaluate, "sft", expert)
    # a stage that writes as the expert does except Procedural (garbled, so nothing) and Semantic (nothing either)
    stage = _cache(evaluate, "grpo-0", {k: {**expert[k], "procedural": GARBLED, "semantic": '{"operations": []}'}
                                        for k in keys})
    (res,) = agent_swap.main(["--stages", "grpo-0", *_argv(tmp_path)])
    swaps = res["swaps"]
    assert res["against"] == "sft" and res["sessions"] == len(keys) == 2 and res["ops_schema"] == OPS_SCHEMA
    assert swaps["core"]["mean"] == swaps["episodic"]["mean"] == 0.0  # the same text: no change, exactly
    assert swaps["semantic"]["mean"] < 0 and swaps["procedural"]["mean"] <= 0
    whole = sum(stage["session_rewards"]["evidence"]) / 2 - sum(ref["session_rewards"]["evidence"]) / 2
    assert swaps["all"]["mean"] == pytest.approx(whole)
    assert res["reference_reward"] == pytest.approx(ref["reward"]["evidence"])
    table = (tmp_path / "results" / "agent_swap.md").read_text()
    assert "| grpo-0 | +0.000 [+0.000, +0.000] | +0.000 [+0.000, +0.000] |" in table
    assert json.loads((tmp_path / "results" / "agent_swap.json").read_text()) == [res]
    # every RL stage evaluated is the default; a stage never evaluated is named, not guessed
    assert [r["stage"] for r in agent_swap.main(_argv(tmp_path))] == ["grpo-0"]
    with pytest.raises(SystemExit, match="no held-out evaluation of 'adrpo-0'"):
        agent_swap.main(["--stages", "adrpo-0", *_argv(tmp_path)])


def test_rl_made_under_the_old_parse_rule_is_not_resumed_but_its_sft_stage_is_taken(tmp_path):
    a = parse_args(_argv(tmp_path))
    old = tmp_path / "old"
    old.mkdir()
    made = {k: v for k, v in work_settings(a).items() if k != "ops_schema"}  # written before the rule was recorded
    (old / "settings.json").write_text(json.dumps(made))
    check_work_dir(a, old)  # no RL stage yet: the rule is an RL setting, taken as it is now
    assert json.loads((old / "settings.json").read_text())["ops_schema"] == OPS_SCHEMA
    (old / "settings.json").write_text(json.dumps(made))
    (old / "seed0" / "grpo").mkdir(parents=True)
    (old / "seed0" / "grpo" / "rollouts.0.jsonl").write_text("{}\n")
    with pytest.raises(SystemExit, match=f"ops_schema 1 -> {OPS_SCHEMA}"):
        check_work_dir(a, old)
    # an ablation may still start from its SFT stage: SFT trains on the expert's outputs, valid under every rule
    assert rl_only("ops_schema")


def test_a_ladder_with_more_held_out_sessions_takes_sft_but_evaluates_it_again(tmp_path):
    """The held-out size decides only the evaluations: a ladder that doubles it may start from another's SFT
    stage, and the SFT evaluation copied with it (over fewer sessions) is made again, not reused."""
    from train.ladder.work_folder import take_sft

    small = parse_args(_argv(tmp_path))
    check_work_dir(small, tmp_path / "work")
    few = Evaluator(small, tmp_path / "work")
    _cache(few, "sft", {k: few.scorers["evidence"].expert_action(k) for k in few.keys})
    adapter = tmp_path / "work" / "sft" / "policy" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")

    big = parse_args([*_argv(tmp_path), "--eval_sessions_per_user", "4", "--work_dir", str(tmp_path / "big"),
                      "--sft_from", str(tmp_path / "work")])
    take_sft(big, tmp_path / "big")
    more = Evaluator(big, tmp_path / "big")
    assert len(more.keys) == 4 and set(few.keys) < set(more.keys)
    copied = json.loads(more.cache("sft").read_text())
    assert not more.same_sessions(copied) and few.same_sessions(copied)
    # anything SFT trains under still has to match
    other = parse_args([*_argv(tmp_path), "--work_dir", str(tmp_path / "lr"), "--sft_from", str(tmp_path / "work"),
                        "--set", "stages.sft.overrides.learning_rate=0.5"])
    with pytest.raises(SystemExit, match="Only the RL settings.*held-out size"):
        take_sft(other, tmp_path / "lr")


def test_the_curve_scores_sessions_spread_over_users_unless_a_folder_took_the_first(tmp_path):
    """With 12 held-out sessions a user, a curve of the list's first 12 would score one user; it takes sessions
    evenly spaced through the list. A folder made before the setting scored the first ones and keeps doing so."""
    from train.ladder.work_folder import made_settings

    argv = [*_argv(tmp_path), "--held_out_users", "2-3", "--curve_sessions", "2"]
    spread = Evaluator(parse_args(argv), tmp_path / "work")
    keys = spread.keys
    assert len(keys) == 4 and len({k.split("/")[0] for k in keys}) == 2
    assert spread.curve_keys() == [keys[0], keys[2]]  # one session of each user
    first = Evaluator(parse_args([*argv, "--curve_pick", "first"]), tmp_path / "work")
    assert first.curve_keys() == keys[:2] and {k.split("/")[0] for k in first.curve_keys()} == {keys[0].split("/")[0]}
    with pytest.raises(ValueError, match="curve_pick 'last'"):
        parse_args([*argv, "--curve_pick", "last"])
    old = tmp_path / "old"
    old.mkdir()
    added = ("curve_pick", "stages.sft.overrides.empty_memory_repeats")
    (old / "settings.json").write_text(json.dumps({k: v for k, v in work_settings(parse_args(argv)).items()
                                                   if k not in added}))
    made = made_settings(old / "settings.json")  # a folder from before: first sessions once, the first curve keys
    assert made["curve_pick"] == "first" and "stages.sft.overrides.empty_memory_repeats" not in made
    once = work_settings(parse_args([*argv, "--set", "stages.sft.overrides.empty_memory_repeats=1"]))
    assert "stages.sft.overrides.empty_memory_repeats" not in once  # naming the script's default changes nothing
    assert work_settings(parse_args(argv))["stages.sft.overrides.empty_memory_repeats"] == 4
    none_added = work_settings(parse_args([*argv, "--set", "stages.sft.overrides.first_period_sessions=0"]))
    assert none_added == work_settings(parse_args(argv))
    assert work_settings(parse_args([*argv, "--set", "stages.sft.overrides.first_period_sessions=6"]))[
        "stages.sft.overrides.first_period_sessions"] == 6
    assert rl_only("curve_pick")


def test_an_evaluation_names_the_weights_it_was_made_of_and_is_read_while_they_stay(tmp_path):
    import torch
    from safetensors.torch import save_file

    evaluate = Evaluator(parse_args([*_argv(tmp_path), "--interactive_eval", "false"]), tmp_path / "work")
    adapter = tmp_path / "policy" / "adapter"
    adapter.mkdir(parents=True)
    save_file({"w": torch.zeros(4)}, adapter / "adapter_model.safetensors")
    first = policy_weights(str(adapter))
    assert first.startswith("sha256:") and policy_weights(str(adapter)) == first
    assert policy_weights("smollm2-135m") == "model:smollm2-135m"  # a base model stands for its name
    scorer = evaluate.scorers["evidence"]
    res = _cache(evaluate, "grpo-0", {k: scorer.expert_action(k) for k in evaluate.keys})
    evaluate.cache("grpo-0").write_text(json.dumps({**res, "policy_weights": first}))
    _memory_cache(evaluate, "grpo-0", policy_weights=first)
    read = evaluate.cached(str(adapter), "GRPO seed 0", "grpo-0", grounding=False)  # generates nothing
    assert read["reward"] == res["reward"] and read["policy_weights"] == first

    save_file({"w": torch.ones(4)}, adapter / "adapter_model.safetensors")  # trained again, and it came out otherwise
    assert policy_weights(str(adapter)) != first  # tests/train/test_ladder.py judges such a stage again


def test_a_stage_trained_on_another_machine_is_read_from_its_caches_alone(tmp_path):
    evaluate = Evaluator(parse_args([*_argv(tmp_path), "--interactive_eval", "false"]), tmp_path / "work")
    scorer = evaluate.scorers["evidence"]
    res = _cache(evaluate, "grpo-1", {k: scorer.expert_action(k) for k in evaluate.keys})
    # made on the machine that trained it, stamped with weights this machine has never seen
    evaluate.cache("grpo-1").write_text(json.dumps({**res, "policy_weights": "sha256:elsewhere"}))
    _memory_cache(evaluate, "grpo-1", policy_weights="sha256:elsewhere")
    read = evaluate.cached(None, "GRPO seed 1", "grpo-1", grounding=False)
    assert read["reward"] == res["reward"] and read["real_grounding"] is None
    # a cache that does not fit this ladder cannot be made again without the weights: a clear error, not a guess
    evaluate.cache("grpo-1").write_text(json.dumps({**res, "session_pick": "first"}))
    with pytest.raises(FileNotFoundError, match="adapter is not on this machine"):
        evaluate.cached(None, "GRPO seed 1", "grpo-1", grounding=False)


def test_conv26_writes_cached_before_the_words_never_said_get_them_on_read(tmp_path):
    """A stage's conv-26 cache from before entries recorded their capitalised words never said is filled in from
    the same windows (the base model's tokenizer) and kept so: old stages report the check without writing again."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from membuilder.llm.registry import resolve_chat_path
    from memgym_env.benchmarks.grounding import dialogue_so_far
    from memgym_env.benchmarks.locomo import read_locomo

    evaluate = Evaluator(parse_args([*_argv(tmp_path), "--interactive_eval", "false", "--grounding_sessions", "2"]),
                         tmp_path / "work")
    scorer = evaluate.scorers["evidence"]
    res = _cache(evaluate, "grpo-1", {k: scorer.expert_action(k) for k in evaluate.keys})
    _memory_cache(evaluate, "grpo-1")
    settings = evaluate.grounding_settings()
    tokenizer = AutoTokenizer.from_pretrained(resolve_chat_path(evaluate.a.model_name_or_path))
    sessions = read_locomo(Path(settings["data"]))[0].sessions[:2]
    windows = [(s.id, w) for s, w, _, _ in
               dialogue_so_far(sessions, settings["window_tokens"], lambda t: len(tokenizer.encode(t, add_special_tokens=False)))]
    writes = [{"session": sid, "window": w, "agent": "semantic", "text": "Support group: Carsmel", "shown": 0.67,
               "dialogue": 0.67} for sid, w in windows[:2]]
    cached = {"settings": settings, "engine_dtype": evaluate.engine_dtype(), "ops_schema": OPS_SCHEMA,
              "all": {"entries": 2, "grounded": 0}, "sessions": 2, "outputs": len(windows),
              "window_tokens": settings["window_tokens"], "writes": writes}
    evaluate.cache("grpo-1-grounding").write_text(json.dumps(cached))
    read = evaluate.cached(None, "GRPO seed 1", "grpo-1", grounding=False)["real_grounding"]
    assert read["distinct"]["unsaid"]["entries"] == 1 and read["distinct"]["unsaid"]["words"] == [("Carsmel", 1)]
    assert [w["unsaid"] for w in read["writes"]] == [["Carsmel"], ["Carsmel"]]
    kept = json.loads(evaluate.cache("grpo-1-grounding").read_text())
    assert kept["writes"] == read["writes"] and res["reward"] is not None
