"""Every shipped training config starts: it builds its world, its scorer and its first generation
batch (SFT: its first training batch), with the policy, answerer and judge replaced by a tiny
local model, vLLM off and one session per user. vLLM configs fail clearly without vLLM."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl")

from trl import ModelConfig, SFTConfig, TrlParser  # noqa: E402

from membuilder.memory.ops import AGENTS  # noqa: E402
from train import adrpo, grpo_plain_trl, sft
from train.common import parse_users, require_vllm  # noqa: E402
from train.ladder import settings as ladder  # noqa: E402
from train.ladder.evaluator import Evaluator  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "train"
CPU = ["--use_vllm", "false", "--bf16", "false", "--use_cpu", "true", "--gradient_checkpointing", "false",
       "--dtype", "float32", "--report_to", "none", "--max_sessions_per_user", "1"]


def _yaml(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text(encoding="utf-8"))


def _env(name: str, tiny: str) -> list[str]:
    """The config's own env settings, with every model role played by the tiny model."""
    env = dict(_yaml(name).get("env_overrides") or {})
    env.update(answerer=tiny, judge=None)
    return ["--env_overrides", json.dumps(env)]


def first_generation_batch(trainer):
    trainer.model.train()
    return trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("adrpo*.yaml") if "vllm" not in p.name))
def test_adrpo_config_builds_its_world_scorer_and_first_generation_batch(name, tiny_chat_path, tmp_path):
    config = _yaml(name)
    trainer, script, _ = adrpo.build(["--config", str(CONFIGS / name), "--model_name_or_path", tiny_chat_path,
                                      "--output_dir", str(tmp_path), "--max_completion_length", "8", *CPU,
                                      *_env(name, tiny_chat_path)])
    args = trainer.args
    env = script.construction_config()
    assert env.answer_mode == "evidence" if "smollm2" in name else config["env_overrides"]["answer_mode"]
    users = parse_users(script.users)
    assert len(trainer.train_dataset) == len(AGENTS) * len(users)  # one session of every chosen user
    assert args.steps_per_generation == args.gradient_accumulation_steps  # one optimizer update per rollout batch
    out = first_generation_batch(trainer)
    assert len(out["adrpo_weights"]) == len(out["advantages"]) == args.generation_batch_size
    if "qwen3" in name:
        assert (args.learning_rate, args.epsilon, args.beta, args.num_generations, args.temperature,
                args.top_p, env.alpha, env.lam) == (1e-6, 0.2, 0.02, 8, 0.8, 0.9, 4.0, 0.8)
        assert config["use_vllm"] and config["vllm_mode"] == ("server" if "server" in name else "colocate")
        assert config["env_overrides"]["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("sft*.yaml")))
def test_sft_config_builds_its_world_and_first_batch(name, tiny_chat_path, tmp_path):
    trainer, script, _ = sft.build(["--config", str(CONFIGS / name), "--model_name_or_path", tiny_chat_path,
                                    "--output_dir", str(tmp_path), "--dataset_jsonl", str(tmp_path / "rows.jsonl"),
                                    *CPU[2:]])
    assert len(trainer.train_dataset) == len(AGENTS) * len(parse_users(script.users))
    batch = next(iter(trainer.get_train_dataloader()))
    assert (batch["labels"] != -100).any() and (batch["labels"] == -100).any()  # loss on the assistant turn only


def test_plain_trl_config_builds_its_world_reward_and_first_generation_batch(tiny_chat_path, tmp_path):
    name = "grpo_plain_trl_cpu.yaml"
    trainer, script, _ = grpo_plain_trl.build(["--config", str(CONFIGS / name), "--model_name_or_path", tiny_chat_path,
                                               "--output_dir", str(tmp_path), "--max_completion_length", "8", *CPU,
                                               *_env(name, tiny_chat_path)])
    assert type(trainer).__name__ == "GRPOTrainer" and trainer.reward_func_names == ["session_reward"]
    assert len(trainer.train_dataset) == len(AGENTS) * len(parse_users(script.users))
    out = first_generation_batch(trainer)
    assert len(out["advantages"]) == trainer.args.generation_batch_size


def test_sft_and_rl_of_one_recipe_read_one_world():
    for a, b in (("sft_smollm2_cpu.yaml", "adrpo_smollm2_cpu.yaml"), ("sft_qwen3_4b.yaml", "adrpo_qwen3_4b_colocate.yaml")):
        world = ("env_config", "world_config", "world_overrides", "world_path")
        sa, sb = _yaml(a), _yaml(b)
        assert sa["env_config"] == sb["env_config"]
        assert {k: sa["env_overrides"].get(k) for k in world} == {k: sb["env_overrides"].get(k) for k in world}
        assert not set(parse_users(sa["users"])) & set(parse_users(sb["users"])) or "smollm2" in a


def test_ladder_defaults_equal_its_yaml_and_its_stages_build(tiny_chat_path, tmp_path):
    name = "ladder_smollm2_cpu.yaml"
    parsed = ladder.parse_args(["--config", str(CONFIGS / name)])
    defaults = ladder.LadderArgs()
    assert {f.name: getattr(defaults, f.name) for f in fields(defaults)} == {
        f.name: getattr(parsed, f.name) for f in fields(parsed)}
    assert not set(parse_users(parsed.train_users)) & set(parse_users(parsed.held_out_users))
    assert (parsed.rl_engine, parsed.eval_engine) == ("vllm", "vllm")  # the ladder runs from .venv-vllm
    parsed.choice_answerer = tiny_chat_path
    parsed.eval_sessions_per_user = 1
    evaluate = Evaluator(parsed, tmp_path)
    assert len(evaluate.keys) == len(parse_users(parsed.held_out_users)) >= 8
    assert set(evaluate.scorers) == {"evidence", "choice"}
    # the SFT stage as the ladder starts it (its own test builds its first batch) ...
    (script, sft_args, _) = TrlParser((sft.SFTScriptArgs, SFTConfig, ModelConfig)).parse_args_and_config(
        ladder.sft_argv(parsed, tmp_path / "sft"))
    assert (script.users, script.max_sessions_per_user, script.session_pick, sft_args.learning_rate) == (
        "0-7", 20, "every_period", 1e-3)
    # ... and the GRPO stage, from a tiny model, one session per user; its rollouts come from vLLM
    # (tests/engine_vllm runs that engine), switched off here, where the default virtualenv has none
    argv = ladder.rl_argv(parsed, "grpo", 0, tiny_chat_path, tmp_path)
    stage = yaml.safe_load(Path(argv[1]).read_text())
    assert (stage["use_vllm"], stage["vllm_mode"], stage["vllm_max_model_length"]) == (True, "colocate", 2048)
    trainer, *_ = adrpo.build([*argv, "--max_completion_length", "8", *CPU])
    config = trainer.session_reward.scorer.config
    assert (config.alpha, config.answer_mode, config.world_overrides["wording"]) == (1.0, "stale", "varied")
    args = trainer.args
    assert (args.num_generations, args.temperature, args.top_p, args.share_prompt) == (8, 0.8, 0.9, True)
    assert not args.vllm_importance_sampling_correction  # vLLM's log-probs are after top-p, the trainer's are not
    assert args.mask_truncated_completions and args.learning_rate == 3e-5  # train/ladder/README.md, the mask run
    # four sessions per generation batch (and optimizer step), one agent prompt per micro-batch
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (args.num_generations, 16)
    assert args.generation_batch_size == 16 * args.num_generations
    out = first_generation_batch(trainer)
    assert len(out["adrpo_weights"]) == 128
    prompts = out["prompt_ids"]
    assert len({tuple(r.tolist()) for r in prompts}) == 16  # 4 sessions x 4 agent prompts, G completions each
    # the two ADRPO stages differ from it in alpha and in the rule that names the dominant memory
    for name, rule in (("adrpo", "evidence"), ("adrpo_retrieval", "retrieval")):
        assert (parsed.alpha(name), parsed.attribution(name)) == (4.0, rule)
    assert [parsed.seeds_of(s) for s in parsed.rl_stages] == [[0, 1, 2], [0, 1, 2], [0]]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_config_without_vllm_fails_at_start_with_the_fix():
    with pytest.raises(SystemExit, match="use_vllm: false"):
        require_vllm(True)
    require_vllm(False)


def test_the_rl_step_benchmark_runs_the_ladders_step_on_each_engine_as_named(monkeypatch, tmp_path):
    """bench/adrpo_step.py --recipe ladder: the transformers engines generate with the trainer, vllm with the engine."""
    import sys

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    sys.modules.pop("adrpo_step", None)
    import adrpo_step
    from trl import ModelConfig

    from membuilder.training.adrpo import ADRPOConfig

    for engine in ("hf-fp32", "hf-bf16", "vllm", "vllm-trl-ratio", "vllm-no-skip"):
        argv = [*adrpo_step.recipe_argv("ladder", engine, str(tmp_path)), *adrpo_step.RUNS[engine][1]]
        stage = yaml.safe_load(Path(argv[1]).read_text())
        assert stage["use_vllm"] == engine.startswith("vllm") and stage["num_generations"] == 8, engine
        _, args, _ = TrlParser((adrpo.ADRPOScriptArgs, ADRPOConfig, ModelConfig)).parse_args_and_config(argv)
        # the vLLM runs differ from the default only in where the importance ratio comes from, or in skipping
        assert args.is_ratio_from_loss == (engine != "vllm-trl-ratio"), engine
        assert args.skip_tied == (engine != "vllm-no-skip"), engine
    assert adrpo_step.recipe_argv("cpu", "vllm", str(tmp_path)) == ["--config", "configs/train/adrpo_smollm2_cpu_vllm.yaml"]


def test_the_ladder_evaluation_benchmark_measures_a_stage_and_compares_engines(monkeypatch, tiny_chat_path):
    """bench/ladder_eval.py's worker on the transformers engine (the ladder's held-out sessions, one per user)."""
    import sys

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    sys.modules.pop("ladder_eval", None)
    import ladder_eval

    res = ladder_eval.measure("transformers", tiny_chat_path, memory=False, sessions_per_user=1)
    assert res["sessions"] == len(parse_users(ladder.LadderArgs().held_out_users)) and res["eval_seconds"] > 0
    assert res["memory_score"] is None
    same = ladder_eval.agreement(res, res)
    assert same["same_text_share"] == 1.0 and same["outputs"] == 4 * res["sessions"]
    assert same["reward_difference"] == 0.0 and same["reward_difference_ci"] == [0.0, 0.0]
    other = {**res, "session_rewards": [r + 0.5 for r in res["session_rewards"]]}
    assert ladder_eval.agreement(res, other)["reward_difference"] == 0.5


def test_the_lora_dropout_benchmark_times_both_passes_and_sees_the_masks_noise(monkeypatch, tmp_path):
    """bench/lora_dropout.py on SmolLM2 (small sizes): with dropout two no-gradient passes differ, without they agree."""
    import sys

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    sys.modules.pop("lora_dropout", None)
    import lora_dropout

    out = tmp_path / "lora_dropout.json"
    res = lora_dropout.main(["--dtype", "float32", "--repeats", "1", "--generations", "2", "--completion-tokens", "16",
                             "--prompt-tokens", "200", "--out", str(out)])
    assert res["two_rollout_passes_identical"] == {"dropout_0.05": False, "dropout_0": True}
    assert res["dropout_layers"] == 30 * 7  # SmolLM2's 30 blocks x 7 adapted linear layers
    assert json.loads(out.read_text())["median_both_passes_s"]["dropout_0"] > 0


def test_the_shared_prompt_benchmark_times_passes_that_agree_at_real_tokens(monkeypatch, tmp_path):
    """bench/shared_prompt_loss.py on SmolLM2 (small sizes): TRL's pass, the shared prompt over the batch's width,
    the shared prompt cut to the group's longest and the shared prompt a completion at a time give the same
    log-probs where the loss reads them, each pushing fewer tokens through the model than the one before."""
    import sys

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    sys.modules.pop("shared_prompt_loss", None)
    import shared_prompt_loss

    out = tmp_path / "shared_prompt_loss.json"
    res = shared_prompt_loss.main(["--lengths", "3,9", "--completion-tokens", "24", "--prompt-tokens", "120",
                                   "--repeats", "1", "--rows-per-pass", "1", "--out", str(out)])
    assert res["max_abs_logp_difference"] < 1e-3
    tokens = res["tokens_through_model"]
    assert tokens["shared_rows1"] == res["prompt_tokens"] + 3 + 9
    assert tokens["shared_rows1"] < tokens["shared"] == res["prompt_tokens"] + 2 * 9
    assert tokens["shared"] < tokens["shared_full_width"] < tokens["per_row"]
    assert set(json.loads(out.read_text())["median_s"]) == {"per_row", "shared_full_width", "shared", "shared_rows1"}
    assert set(res["speedup_over_shared"]) == {"shared_rows1"}
