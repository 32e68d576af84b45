"""A training config turns on the benchmark evaluation: a LoCoMo or LongMemEval sample scored
with the live policy every N optimizer steps, inside a real SFT run of a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from train import sft  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
LOCOMO = DATA / "locomo" / "locomo10_conv-26.json"
LME_ORACLE = DATA / "longmemeval" / "longmemeval_oracle_sample.json"
CPU = ["--bf16", "false", "--use_cpu", "true", "--gradient_checkpointing", "false", "--dtype", "float32",
       "--report_to", "none", "--use_peft", "false", "--save_strategy", "no", "--logging_steps", "1"]


def _sft_run(tiny: str, out: Path, benchmark_eval: dict, *extra: str):
    """A two-step SFT run of the tiny model on one user's first two sessions (8 rows, batch 4)."""
    env = {"world_config": "configs/env/base.yaml", "world_overrides": {"num_users": 1, "num_periods": 2}}
    return sft.build(["--config", str(ROOT / "configs" / "train" / "sft_smollm2_cpu.yaml"),
                      "--model_name_or_path", tiny, "--output_dir", str(out), "--dataset_jsonl", str(out / "rows.jsonl"),
                      "--save_policy_to", str(out / "policy"), "--env_overrides", json.dumps(env), "--users", "0",
                      "--max_sessions_per_user", "2", "--per_device_train_batch_size", "4",
                      "--gradient_accumulation_steps", "1", "--max_steps", "2", *CPU,
                      "--benchmark_eval", json.dumps(benchmark_eval), *extra])


@pytest.mark.slow
def test_sft_run_scores_a_locomo_sample_every_step_with_the_live_policy(tiny_chat_path, tmp_path):
    bench = {"benchmark": "locomo", "data": str(LOCOMO), "system": "oracle-evidence", "limit": 2,
             "judge": tiny_chat_path, "answer_max_tokens": 4, "judge_max_tokens": 4}
    trainer, _, _ = _sft_run(tiny_chat_path, tmp_path, bench, "--benchmark_eval_steps", "1",
                             "--benchmark_eval_roles", "answerer")
    trainer.train()
    logged = [h for h in trainer.state.log_history if "eval/locomo/headline" in h]
    assert [h["step"] for h in logged] == [1, 2]
    assert all(0.0 <= h["eval/locomo/headline"] <= 1.0 for h in logged)
    for step in (1, 2):  # each policy version answered into its own folder
        items = json.loads((tmp_path / "benchmark_eval" / f"step-{step}" / "results.json").read_text())["items"]
        assert len(items) == 2 and all(it["answer"] is not None for it in items)
    assert trainer.model.training  # the evaluation handed the model back in training mode


@pytest.mark.slow
def test_longmemeval_sample_every_two_steps(tiny_chat_path, tmp_path):
    bench = {"benchmark": "longmemeval", "data": str(LME_ORACLE), "system": "oracle-evidence", "limit": 1,
             "judge": tiny_chat_path, "answer_max_tokens": 4, "judge_max_tokens": 4, "judge_check": False}
    trainer, _, _ = _sft_run(tiny_chat_path, tmp_path, bench, "--benchmark_eval_steps", "2",
                             "--benchmark_eval_roles", "answerer")
    trainer.train()
    steps = [h["step"] for h in trainer.state.log_history if "eval/longmemeval/overall" in h]
    assert steps == [2]
    assert not (tmp_path / "benchmark_eval" / "step-1").exists()


def test_without_benchmark_eval_no_callback_is_attached(tiny_chat_path, tmp_path):
    from train.benchmark_callback import BenchmarkEvalCallback

    trainer, script, _ = _sft_run(tiny_chat_path, tmp_path, {})
    assert script.benchmark_eval == {}
    assert not any(isinstance(cb, BenchmarkEvalCallback) for cb in trainer.callback_handler.callbacks)


def test_a_benchmark_eval_key_that_is_not_an_eval_field_is_refused(tiny_chat_path, tmp_path):
    with pytest.raises(SystemExit, match="benchmark_eval: .*'sample'.*EvalConfig"):
        _sft_run(tiny_chat_path, tmp_path, {"benchmark": "locomo", "data": str(LOCOMO), "sample": 3})
