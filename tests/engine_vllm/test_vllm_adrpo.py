"""ADRPO with vLLM's CPU engine colocated in the trainer: two real steps, and proof that the
policy's weights reach the engine at every sync (membuilder/training/vllm_cpu_sync.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from train.common import close_colocated_engine, require_vllm  # noqa: E402
from train.ladder.evaluator import Evaluator  # noqa: E402
from train.ladder.settings import LadderArgs, rl_argv  # noqa: E402

pytestmark = pytest.mark.slow

TINY_RUN = ["--max_steps", "2", "--max_completion_length", "16", "--max_prompt_tokens", "768",
            "--users", "0-1", "--max_sessions_per_user", "1", "--learning_rate", "1e-3", "--save_strategy", "no",
            "--logging_steps", "1", "--vllm_max_model_length", "1024"]


@pytest.fixture
def release():
    """Call it with each trainer a test builds: their colocated engines are closed when the test ends, pass or
    fail. Left open, each engine held its model and KV cache (2.5-3 GB) until the suite ran out of memory."""
    built = []
    yield built.append
    for trainer in built:
        close_colocated_engine(trainer)


def test_server_mode_on_a_cpu_stops_at_start_and_says_why():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine can run vllm_mode: server")
    with pytest.raises(SystemExit, match="NCCL"):
        require_vllm(True, "server")
    require_vllm(True, "colocate")


def test_two_adrpo_steps_with_a_colocated_engine_whose_weights_follow_the_policy(tmp_path, monkeypatch, release):
    import torch
    from vllm import SamplingParams

    from train.adrpo import build

    monkeypatch.chdir(ROOT)
    trainer, _, tokenizer = build(["--config", "configs/train/adrpo_smollm2_cpu_vllm.yaml", *TINY_RUN,
                                   "--output_dir", str(tmp_path / "run")])
    release(trainer)
    generation = trainer.vllm_generation
    assert generation.mode == "colocate"
    assert getattr(generation.sync_weights, "__name__", "") == "<lambda>"  # the CPU sync, not TRL's per-tensor push
    # TRL builds the engine in the checkpoint's bfloat16; on a CPU it runs in the dtype the CPU computes natively.
    from membuilder.llm.vllm_backend import cpu_engine_dtype

    assert str(generation.llm.llm_engine.model_config.dtype) == f"torch.{cpu_engine_dtype()}"
    trainer.train()
    steps = [h for h in trainer.state.log_history if "reward/task" in h]
    assert len(steps) == 2 and all(h["completions/mean_length"] > 0 for h in steps)
    assert all("adrpo/weight_core" in h and "time/generate" in h for h in steps)

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "List three fruits."}],
                                           add_generation_prompt=True, tokenize=False)
    greedy = SamplingParams(temperature=0.0, max_tokens=12)

    def engine_reply() -> list[int]:
        return list(generation.llm.generate([prompt], greedy, use_tqdm=False)[0].outputs[0].token_ids)

    generation.sync_weights()
    before = engine_reply()
    weight = next(p for n, p in trainer.model.named_parameters() if n.endswith("layers.0.mlp.down_proj.base_layer.weight"))
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.mul_(-3.0)
    generation.sync_weights()
    changed = engine_reply()
    with torch.no_grad():
        weight.copy_(saved)
    generation.sync_weights()
    assert changed != before, "the engine did not see the new weights"
    assert engine_reply() == before, "restoring the weights did not restore the engine's greedy reply"


def test_a_run_continuing_a_lora_adapter_starts_its_engine_from_the_base_and_syncs_the_adapter(tmp_path, monkeypatch,
                                                                                             release):
    """The ladder's RL stages continue the SFT adapter: the engine cannot load an adapter folder, so it
    starts from the adapter's base and gets the merged policy before the first rollout."""
    from train.adrpo import build
    from train.common import full_checkpoint

    monkeypatch.chdir(ROOT)
    adapter = "membuilder/policies/smollm2-135m-memgym"
    trainer, _, _ = build(["--config", "configs/train/adrpo_smollm2_cpu_vllm.yaml", *TINY_RUN, "--max_steps", "1",
                           "--model_name_or_path", adapter, "--output_dir", str(tmp_path / "run")])
    release(trainer)
    assert trainer.model.name_or_path == full_checkpoint(adapter) != adapter
    trainer.train()
    assert trainer._last_loaded_step == 0  # synced before the first rollout
    steps = [h for h in trainer.state.log_history if "reward/task" in h]
    assert len(steps) == 1 and steps[0]["completions/mean_length"] > 0


def test_the_ladders_rl_runs_follow_one_another_in_one_process_each_with_its_own_engine(tmp_path, monkeypatch,
                                                                                         release):
    """make ladder trains its RL runs one after the other in one process, each with a colocated engine,
    as ``train.ladder.settings.rl_argv`` (use_vllm in the shipped RL stages) starts them from the SFT adapter."""
    import gc
    import weakref

    from train.adrpo import build

    monkeypatch.chdir(ROOT)
    # one session a step (the shipped 4 need more sessions than the one given below), G = 2
    a = LadderArgs(max_completion_tokens=16, set=[f"stages.{s}.overrides.{k}={v}" for s in ("adrpo", "grpo")
                                                  for k, v in (("num_generations", 2), ("per_device_train_batch_size", 2),
                                                               ("sessions_per_step", 1))])
    assert a.rl_engine == "vllm"
    for run, alpha in (("adrpo", 4.0), ("grpo", 1.0)):
        argv = rl_argv(a, run, 0, "membuilder/policies/smollm2-135m-memgym", tmp_path / run)
        trainer, _, _ = build([*argv, "--max_steps", "1", "--users", "0", "--max_sessions_per_user", "1",
                               "--save_strategy", "no", "--logging_steps", "1", "--vllm_max_model_length", "1024"])
        release(trainer)
        assert trainer.vllm_generation.mode == "colocate"
        assert trainer.session_reward.scorer.config.alpha == alpha
        frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
        trainer.train()
        steps = [h for h in trainer.state.log_history if "reward/task" in h]
        assert len(steps) == 1 and steps[0]["completions/mean_length"] > 0, run
        # the sync sent the merged policy without merging into the bfloat16 base, which would round it
        assert all(torch.equal(p, frozen[n]) for n, p in trainer.model.named_parameters() if n in frozen), run
        if run == "adrpo":  # a curve point, as the ladder takes one mid-run, from the trainer's own engine
            from transformers import TrainerState

            from train.ladder.curve_callback import CurveCallback

            evaluator = Evaluator(LadderArgs(held_out_users="8", eval_sessions_per_user=1, max_completion_tokens=16),
                                  tmp_path / "work")
            curve = CurveCallback(evaluator, every=1, label=run)
            curve.attach(trainer)
            mode = trainer.model.training
            # the point before any update (the ladder checks it against SFT's own evaluation), then one mid-run
            curve.on_train_begin(trainer.args, TrainerState(global_step=0, max_steps=2), None, model=trainer.model,
                                 processing_class=trainer.processing_class)
            curve.on_step_end(trainer.args, TrainerState(global_step=1, max_steps=2), None, model=trainer.model,
                              processing_class=trainer.processing_class)
            start, point = curve.points
            assert start["engine"] == "vllm" and start["step"] == 0 and 0.0 <= start["held_out_reward"] <= 1.0
            assert point["engine"] == "vllm" and point["step"] == 1 and 0.0 <= point["held_out_reward"] <= 1.0
            assert trainer.model.training == mode
        # as the ladder does between stages: the closed engine's model is freed, not kept for the process's life
        from membuilder.llm.vllm_backend import _in_process_model

        layers = [weakref.ref(m) for m in _in_process_model(trainer.vllm_generation.llm.llm_engine).modules()]
        close_colocated_engine(trainer)
        del trainer, steps
        gc.collect()
        held = sorted({type(ref()).__name__ for ref in layers if ref() is not None})
        assert not held, f"{run}: the closed engine's layers are still held: {held}"


def test_the_importance_ratio_read_off_the_loss_pass_gives_trls_loss_and_statistics(tmp_path, monkeypatch, release):
    """With no dropout and one update per generation batch, the vLLM importance ratio computed from the loss
    pass's log-probs (no separate forward after generation) gives the loss and the mismatch statistics that TRL's
    own pass gives on the same completions; with dropout on, TRL's pass runs."""
    from train.adrpo import build

    monkeypatch.chdir(ROOT)
    trainer, _, _ = build(["--config", "configs/train/adrpo_smollm2_cpu_vllm.yaml", *TINY_RUN, "--max_steps", "1",
                           "--temperature", "1.0", "--max_completion_length", "24", "--output_dir", str(tmp_path / "run")])
    release(trainer)
    assert trainer.ratio_in_loss
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # what train() sets
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.ratio_in_loss = False  # TRL's path: a no-grad pass after generation computes the ratio
    reference = trainer._generate_and_score_completions(batch)
    trls = {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith("sampling/")}
    assert set(trls) == {"sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
                         "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
                         "sampling/importance_sampling_ratio/max"}
    assert trls["sampling/importance_sampling_ratio/min"] != trls["sampling/importance_sampling_ratio/max"]
    # two tiny rollouts often score alike (zero advantage, zero loss whatever the ratio): give every completion
    # its own advantage so the loss depends on each ratio
    reference["advantages"] = torch.linspace(-1.0, 1.0, len(reference["advantages"]))
    with torch.no_grad():
        trls_loss = trainer._compute_loss(trainer.model, reference)

    trainer.ratio_in_loss = True
    fused = {k: v for k, v in reference.items() if k not in ("old_per_token_logps", "importance_sampling_ratio")}
    with torch.no_grad():
        loss = trainer._compute_loss(trainer.model, fused)
    assert "importance_sampling_ratio" not in fused  # the ratio lived in the loss's own copy of the inputs
    ours = trainer._ratio_stats["train"].pop()
    assert set(ours) == set(trls)
    for name, value in trls.items():
        assert ours[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name
    assert float(loss) == pytest.approx(float(trls_loss), rel=1e-4, abs=1e-6)
    # the ratio matters: TRL's loss with every ratio 1 differs
    trainer.ratio_in_loss = False
    with torch.no_grad():
        unweighted = trainer._compute_loss(trainer.model, {**reference, "importance_sampling_ratio": torch.ones_like(
            reference["importance_sampling_ratio"])})
    assert float(unweighted) != pytest.approx(float(trls_loss), rel=1e-4, abs=1e-6)

    again, _, _ = build(["--config", "configs/train/adrpo_smollm2_cpu_vllm.yaml", *TINY_RUN, "--max_steps", "1",
                         "--disable_dropout", "false", "--output_dir", str(tmp_path / "dropout")])
    release(again)
    assert not again.ratio_in_loss
