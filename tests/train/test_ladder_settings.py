"""The ladder's settings: each stage is its entry point's config with overrides in that config's own names,
the shipped ladder gives its stages exactly what the ladder with flat names gave them, and work folders made
under the flat names still resume and lend their SFT stage."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from trl import ModelConfig, SFTConfig, TrlParser  # noqa: E402

from membuilder.training.adrpo import ADRPOConfig  # noqa: E402
from train.adrpo import ADRPOScriptArgs  # noqa: E402
from train.ladder.settings import parse_args, rl_argv, sft_argv  # noqa: E402
from train.ladder.work_folder import check_work_dir, made_settings, take_sft, work_settings  # noqa: E402
from train.sft import SFTScriptArgs  # noqa: E402

LADDER = ["--config", "configs/train/ladder_smollm2_cpu_published.yaml"]  # the recipe of the flat names

# The stage command lines the ladder built from configs/train/ladder_smollm2_cpu.yaml at commit 03954a1, when
# its settings had flat names (sft_learning_rate, rl_generations, adrpo_alpha, ...) and the argv carried the
# world's overrides as JSON; FOLDER and START stand for the stage's folder and the SFT adapter.
OLD_SFT_ARGV = [
    "--config", "configs/train/sft_smollm2_cpu.yaml", "--model_name_or_path", "smollm2-135m",
    "--env_config", "configs/env/construction_cpu.yaml", "--env_overrides", "{}", "--users", "0-7",
    "--max_prompt_tokens", "384", "--max_sessions_per_user", "38", "--seed", "0", "--output_dir", "FOLDER",
    "--save_policy_to", "FOLDER/policy", "--dataset_jsonl", "FOLDER/sft_rows.jsonl", "--num_train_epochs", "1",
    "--keep_empty_rows", "0.25", "--learning_rate", "0.001", "--save_strategy", "steps", "--save_steps", "20",
    "--save_total_limit", "1", "--gradient_accumulation_steps", "4"]
OLD_RL_ARGV = [
    "--config", "configs/train/adrpo_smollm2_cpu.yaml", "--model_name_or_path", "START",
    "--env_config", "configs/env/construction_cpu.yaml", "--env_overrides", "ENV", "--users", "0-7",
    "--max_prompt_tokens", "384", "--max_sessions_per_user", "None", "--seed", "SEED", "--output_dir", "FOLDER",
    "--max_steps", "100", "--num_generations", "8", "--per_device_train_batch_size", "8", "--share_prompt", "true",
    "--gradient_accumulation_steps", "4", "--temperature", "1.0", "--top_p", "1.0", "--max_completion_length", "256",
    "--learning_rate", "0.0001", "--save_strategy", "steps", "--save_steps", "10", "--save_total_limit", "1",
    "--rollout_log", "FOLDER/rollouts", "--use_vllm", "true", "--vllm_mode", "colocate",
    "--vllm_max_model_length", "2048"]
OLD_RL_ENV = {"adrpo": '{"alpha": 4.0, "lam": 0.8, "reward_density": 1}',
              "grpo": '{"alpha": 1.0, "lam": 0.8, "reward_density": 1}'}


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# That ladder's work folder settings.json, as its work_settings wrote it (with the configs' text as it is now:
# a folder resumes only under the configs it was made with).
OLD_SETTINGS = {
    "model_name_or_path": "smollm2-135m", "sft_config": "configs/train/sft_smollm2_cpu.yaml",
    "adrpo_config": "configs/train/adrpo_smollm2_cpu.yaml", "env_config": "configs/env/construction_cpu.yaml",
    "env_overrides": {}, "train_users": "0-7", "held_out_users": "8-15", "sft_sessions_per_user": 38,
    "rl_sessions_per_user": None, "eval_sessions_per_user": 6, "sft_seed": 0, "sft_epochs": 1,
    "sft_learning_rate": 0.001, "sft_gradient_accumulation_steps": 4, "sft_keep_empty_rows": 0.25, "rl_steps": 100,
    "rl_engine": "vllm", "vllm_kv_cache_gb": 2, "rl_generations": 8, "rl_temperature": 1.0,
    "rl_learning_rate": 0.0001, "adrpo_alpha": 4.0, "max_completion_tokens": 256, "eval_batch_size": 16,
    "max_prompt_tokens": 384, "curve_every": 10, "curve_sessions": 12, "choice_answerer": None,
    "memory_score_world": {"num_users": 2, "num_periods": 2, "rounds_update": 1, "seed": 4242},
    "sft_config_sha256": _sha256("configs/train/sft_smollm2_cpu.yaml"),
    "adrpo_config_sha256": _sha256("configs/train/adrpo_smollm2_cpu.yaml"),
    "env_config_sha256": _sha256("configs/env/construction_cpu.yaml")}


def _parsed(classes, argv: list[str]) -> list[dict]:
    """What a stage's entry point reads from ``argv``, field by field (TrainingArguments' logging_dir carries the
    time it was parsed at)."""
    return [{k: v for k, v in dataclasses.asdict(x).items() if k != "logging_dir"}
            for x in TrlParser(classes).parse_args_and_config(argv)]


def _same(old: list[dict], new: list[dict]) -> None:
    for o, n in zip(old, new, strict=True):
        assert {k: (v, type(v)) for k, v in n.items()} == {k: (v, type(v)) for k, v in o.items()}


def test_the_shipped_ladder_gives_sft_exactly_what_the_flat_ladder_gave(tmp_path):
    a = parse_args(LADDER)
    folder = str(tmp_path / "sft")
    old = [x.replace("FOLDER", folder) for x in OLD_SFT_ARGV]
    _same(_parsed((SFTScriptArgs, SFTConfig, ModelConfig), old),
          _parsed((SFTScriptArgs, SFTConfig, ModelConfig), sft_argv(a, Path(folder))))


@pytest.mark.parametrize(("stage", "seed"), [("adrpo", 0), ("grpo", 1)])
def test_the_shipped_ladder_gives_each_rl_stage_exactly_what_the_flat_ladder_gave(tmp_path, stage, seed):
    a = parse_args(LADDER)
    folder = str(tmp_path / stage)
    values = {"FOLDER": folder, "START": "runs/ladder/sft/policy/adapter", "SEED": str(seed), "ENV": OLD_RL_ENV[stage]}
    old = [values.get(x, x.replace("FOLDER", folder)) for x in OLD_RL_ARGV]
    new = rl_argv(a, stage, seed, "runs/ladder/sft/policy/adapter", Path(folder))
    assert new == ["--config", f"{folder}/stage.yaml"]  # typed values in a YAML file, none as JSON in argv
    _same(_parsed((ADRPOScriptArgs, ADRPOConfig, ModelConfig), old),
          _parsed((ADRPOScriptArgs, ADRPOConfig, ModelConfig), new))


def test_set_changes_one_field_of_a_stage_and_repeated_flags_add_up():
    a = parse_args([*LADDER, "--rl_stages", "adrpo", "--set", "stages.adrpo.overrides.env_overrides.alpha=2",
                    "--seeds", "0", "--set", "stages.adrpo.overrides.learning_rate=3e-4",
                    "stages.grpo.overrides.max_sessions_per_user=4"])
    assert (a.alpha("adrpo"), a.alpha("grpo")) == (2, 1.0)
    adrpo = a.stage_config("adrpo")
    assert adrpo["learning_rate"] == 3e-4 and adrpo["max_steps"] == 100 and adrpo["env_overrides"]["lam"] == 0.8
    assert a.stage_config("grpo")["max_sessions_per_user"] == 4 and adrpo["max_sessions_per_user"] is None
    assert a.seeds == [0] and a.rl_engine == "vllm" and a.sft_seed == 0


def test_stage_overrides_cannot_name_what_the_ladder_sets_itself():
    with pytest.raises(ValueError, match=r"stages\.sft\.overrides \['users'\]: the ladder sets these itself"):
        parse_args([*LADDER, "--set", "stages.sft.overrides.users=0-3"])
    with pytest.raises(ValueError, match="PATH=VALUE"):
        parse_args([*LADDER, "--set", "rl_steps=3"])
    with pytest.raises(ValueError, match="vllm_max_model_length"):
        parse_args([*LADDER, "--set", "stages.grpo.overrides.vllm_max_model_length=4096"])


def test_a_work_folder_made_under_the_flat_names_resumes_and_lends_its_sft_stage(tmp_path):
    old = tmp_path / "ladder"
    old.mkdir()
    (old / "settings.json").write_text(json.dumps(OLD_SETTINGS), encoding="utf-8")
    (old / "sft" / "policy" / "adapter").mkdir(parents=True)
    (old / "sft" / "policy" / "adapter" / "adapter_config.json").write_text("{}", encoding="utf-8")
    (old / "eval").mkdir()
    (old / "eval" / "sft.vllm.json").write_text("{}", encoding="utf-8")
    # the recipe as shipped resumes it (and a report of it, --report_only, reads it the same way); a report reads,
    # never rewrites
    check_work_dir(parse_args([*LADDER, "--work_dir", str(old), "--report_only", "true"]), old)
    assert json.loads((old / "settings.json").read_text()) == OLD_SETTINGS
    # it was made before the parse rule was recorded (rule 1), an RL setting: with no RL stage begun, a run takes
    # today's rule and records the folder's settings in today's names, the old ones read the same
    resumed = parse_args([*LADDER, "--work_dir", str(old)])
    check_work_dir(resumed, old)
    assert json.loads((old / "settings.json").read_text()) == work_settings(resumed)
    assert made_settings(old / "settings.json")["stages.sft.overrides.learning_rate"] == OLD_SETTINGS["sft_learning_rate"]
    # it evaluated each held-out user's first sessions; either pick resumes it, since each cached evaluation
    # records its pick and one made with another is made again (train.ladder.evaluator.Evaluator.same_sessions)
    assert parse_args(LADDER).eval_session_pick == "every_period"
    check_work_dir(parse_args([*LADDER, "--work_dir", str(old), "--eval_session_pick", "first"]), old)
    with pytest.raises(ValueError, match="eval_session_pick 'last'"):
        parse_args([*LADDER, "--eval_session_pick", "last"])
    with pytest.raises(SystemExit, match=r"stages\.sft\.overrides\.learning_rate 0\.001 -> 0\.002"):
        check_work_dir(parse_args([*LADDER, "--set", "stages.sft.overrides.learning_rate=0.002"]), old)
    # an alpha 2 ablation takes its SFT stage
    work = tmp_path / "alpha2"
    ablation = parse_args([*LADDER, "--rl_stages", "adrpo", "--seeds", "0", "--sft_from", str(old),
                           "--work_dir", str(work), "--set", "stages.adrpo.overrides.env_overrides.alpha=2"])
    take_sft(ablation, work)
    assert (work / "sft" / "policy" / "adapter" / "adapter_config.json").exists()
    assert (work / "eval" / "sft.vllm.json").exists()
    check_work_dir(ablation, work)
    assert json.loads((work / "settings.json").read_text()) == work_settings(ablation)


def test_rl_settings_may_change_until_an_rl_stage_begins(tmp_path):
    """A folder with base and SFT only takes new RL settings (a sweep chose them after SFT); once an RL stage has
    written anything, its settings and those all RL stages share are fixed, a stage not yet run may still take
    new ones, and SFT's settings never change."""
    work = tmp_path / "ladder"
    made = parse_args([*LADDER, "--work_dir", str(work)])
    check_work_dir(made, work)
    (work / "sft" / "policy").mkdir(parents=True)
    (work / "sft" / "policy" / "adapter_config.json").write_text("{}", encoding="utf-8")
    swept = parse_args([*LADDER, "--work_dir", str(work), "--set", "stages.grpo.overrides.learning_rate=3e-05",
                        "stages.grpo.overrides.beta=0.02"])
    check_work_dir(swept, work)
    assert json.loads((work / "settings.json").read_text()) == work_settings(swept)
    with pytest.raises(SystemExit, match=r"stages\.sft\.overrides\.learning_rate"):
        check_work_dir(parse_args([*LADDER, "--work_dir", str(work), "--set",
                                   "stages.sft.overrides.learning_rate=0.002"]), work)
    (work / "seed0" / "grpo").mkdir(parents=True)
    check_work_dir(swept, work)  # an empty RL folder has not begun
    (work / "seed0" / "grpo" / "trainer_log.json").write_text("[]", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"stages\.grpo\.overrides\.learning_rate 3e-05 -> 0\.0001"):
        check_work_dir(made, work)
    # a stage not yet begun under any seed still takes new settings; the begun one and the shared ones do not
    adrpo_later = parse_args([*LADDER, "--work_dir", str(work), "--set", "stages.grpo.overrides.learning_rate=3e-05",
                              "stages.grpo.overrides.beta=0.02", "stages.adrpo.overrides.temperature=0.8"])
    check_work_dir(adrpo_later, work)
    assert made_settings(work / "settings.json")["stages.adrpo.overrides.temperature"] == 0.8
    with pytest.raises(SystemExit, match=r"stages\.grpo\.overrides\.temperature 1\.0 -> 0\.8"):
        check_work_dir(parse_args([*LADDER, "--work_dir", str(work), "--set",
                                   "stages.grpo.overrides.learning_rate=3e-05", "stages.grpo.overrides.beta=0.02",
                                   "stages.adrpo.overrides.temperature=0.8",
                                   "stages.grpo.overrides.temperature=0.8"]), work)
    with pytest.raises(SystemExit, match=r"curve_every"):
        check_work_dir(parse_args([*LADDER, "--work_dir", str(work), "--curve_every", "3", "--set",
                                   "stages.grpo.overrides.learning_rate=3e-05", "stages.grpo.overrides.beta=0.02",
                                   "stages.adrpo.overrides.temperature=0.8"]), work)
