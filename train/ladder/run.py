"""Evidence that training works: base -> SFT -> SFT+ADRPO (alpha 4) and SFT+GRPO (alpha 1).

    make ladder                     # = python -m train.ladder --config configs/train/ladder_smollm2_cpu.yaml

SFT on the world oracle's trajectories of the training users (once, ``sft_seed``), then for each
seed ADRPO and plain GRPO, both continuing the SFT LoRA adapter on the training users' sessions.
Every stage is evaluated on held-out users of the same world (never in SFT or RL data), greedy:

* JSON validity per agent and the share of outputs cut at the token limit;
* MemoryGym-v0's session reward in ``evidence`` mode, with a 95% bootstrap interval over
  sessions (and in ``choice`` mode when ``choice_answerer`` is set);
* the memory score of MemoryGym-Interactive-v0's MemBuilder assistant writing memory with the
  stage's policy, on a small world of its own users, with a 95% bootstrap interval over
  (user, period) cells;
* during RL, a learning curve: the train reward of every step and the held-out reward on the
  first ``curve_sessions`` held-out sessions every ``curve_every`` steps.

Writes ``results/ladder.json`` (one row per stage and seed), ``results/ladder.md`` (tables,
command, config, timings), ``results/ladder.png`` and ``results/ladder_curves.png`` after every
stage, so an interrupted ladder still leaves what it finished; each finished stage is cached
under ``work_dir`` and a rerun resumes. The ADRPO adapter of the first seed is exported in
bfloat16 to ``adapter_out`` with a card of its command, config and held-out scores.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from membuilder.plumbing.json_files import atomic_dir, atomic_write_bytes, write_json
from membuilder.reward import ALPHA
from membuilder.training.checkpoints import save_policy
from memgym_env.construction.config import ConstructionConfig
from train import adrpo, sft
from train.ladder.evaluator import ENGINE_CONTEXT, Evaluator, cached_json, oracle_over_limit
from train.ladder.policy_actions import held_out_actions, rollout_actions
from train.ladder.report import OUTPUT_OPTIONS, recipe_command, recipe_config, write_results
from train.ladder.rl_signal import paired_train_difference, rl_signal

STAGES = ("base", "sft", "grpo", "adrpo")
RL_ALPHA = {"adrpo": None, "grpo": 1.0}  # None: the ladder's adrpo_alpha


@dataclass
class LadderArgs:
    """Defaults equal ``configs/train/ladder_smollm2_cpu.yaml`` (a test holds them together)."""

    model_name_or_path: str = field(default="smollm2-135m", metadata={"help": "Base policy."})
    sft_config: str = field(default="configs/train/sft_smollm2_cpu.yaml", metadata={"help": "SFT config (YAML)."})
    adrpo_config: str = field(default="configs/train/adrpo_smollm2_cpu.yaml", metadata={"help": "ADRPO config (YAML)."})
    env_config: str = field(default="configs/env/construction_cpu.yaml", metadata={"help": "MemoryGym-v0 config (YAML)."})
    env_overrides: str = field(default="{}", metadata={
        "help": "ConstructionConfig fields over env_config, for every stage and the evaluation (YAML mapping; JSON on "
                "the command line)."})
    train_users: str = field(default="0-7", metadata={"help": "Users whose sessions SFT and RL see."})
    held_out_users: str = field(default="8-15", metadata={"help": "Users only evaluated on."})
    sft_sessions_per_user: int | None = field(default=38, metadata={"help": "First N sessions of each training user "
                                                                           "for SFT (None: all)."})
    rl_sessions_per_user: int | None = field(default=None, metadata={"help": "First N sessions of each training user "
                                                                            "for RL (None: all)."})
    eval_sessions_per_user: int = field(default=6, metadata={"help": "First N sessions of each held-out user."})
    seeds: list[int] = field(default_factory=lambda: [0, 1], metadata={"help": "RL seeds."})
    sft_seed: int = field(default=0, metadata={"help": "Seed of the one SFT run every RL seed starts from."})
    sft_epochs: float = field(default=1.0, metadata={"help": "SFT epochs over the oracle rows."})
    sft_learning_rate: float = field(default=1e-3, metadata={"help": "SFT learning rate (LoRA)."})
    sft_gradient_accumulation_steps: int = field(default=4, metadata={"help": "SFT micro-batches per update."})
    sft_keep_empty_rows: float = field(default=0.25, metadata={
        "help": "Share of SFT rows kept whose oracle output writes nothing (sft.py's keep_empty_rows)."})
    sft_save_steps: int = field(default=20, metadata={
        "help": "SFT checkpoint every N updates; a stopped ladder resumes SFT from its last checkpoint."})
    rl_steps: int = field(default=100, metadata={"help": "ADRPO/GRPO optimizer steps (one session each)."})
    rl_save_steps: int = field(default=10, metadata={
        "help": "RL checkpoint every N steps; a stopped ladder resumes a run from its last checkpoint."})
    rl_rollout_log: bool = field(default=True, metadata={
        "help": "Write every scored RL completion (text, reward, weight, advantage) to <run>/rollouts.0.jsonl."})
    rl_engine: str = field(default="vllm", metadata={
        "help": "What generates the RL rollouts: 'transformers' (the trainer's own model) or 'vllm' (vLLM's CPU engine "
                "colocated in the trainer, weights synced after every update; run the ladder from .venv-vllm)."})
    eval_engine: str = field(default="vllm", metadata={
        "help": "What generates the stage evaluations (held-out sessions and the memory score's writer and answerer): "
                "'transformers' or 'vllm' (vLLM's CPU engine; run the ladder from .venv-vllm). Their caches are kept "
                "per engine. The curve points taken during RL come from the trainer's own vLLM engine when it has one "
                "and this is 'vllm', else from the trainer's model."})
    vllm_kv_cache_gb: int = field(default=2, metadata={
        "help": "KV cache of vLLM's CPU engine in GB, for the RL rollouts and the evaluations alike (the ladder sets "
                "$VLLM_CPU_KVCACHE_SPACE from it, over any value already there). It decides how requests are batched, "
                "and so, in bfloat16, some greedy outputs: a rerun reproduces the results with the same size."})
    rl_generations: int = field(default=8, metadata={"help": "G, completions per agent prompt."})
    rl_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the rollouts."})
    rl_learning_rate: float = field(default=1e-4, metadata={"help": "ADRPO/GRPO learning rate (LoRA)."})
    adrpo_alpha: float = field(default=ALPHA, metadata={"help": "alpha of the ADRPO stage (GRPO is alpha 1)."})
    rl_stages: list[str] = field(default_factory=lambda: ["adrpo", "grpo"], metadata={
        "help": "RL stages each seed runs: 'adrpo' (alpha adrpo_alpha) and/or 'grpo' (alpha 1)."})
    sft_from: str | None = field(default=None, metadata={
        "help": "Work folder of another ladder to take the SFT stage from (its adapter and the base and SFT "
                "evaluations) instead of training it again; every setting SFT and the evaluations depend on must "
                "match that ladder's. An RL ablation (adrpo_alpha, rl_*) then costs its RL runs alone."})
    max_completion_tokens: int = field(default=256, metadata={
        "help": "Longest output per agent, in RL rollouts and the held-out evaluation alike; it must hold the "
                "oracle's longest output, or the policy is cut where the expert is not (the ladder reports how many "
                "oracle outputs would be)."})
    eval_batch_size: int = field(default=16, metadata={"help": "Prompts generated together."})
    max_prompt_tokens: int = field(default=384, metadata={"help": "Prompt budget (memory view cut first), SFT and RL."})
    curve_every: int = field(default=10, metadata={"help": "Held-out reward every N RL steps (0: only at the end)."})
    curve_sessions: int = field(default=12, metadata={"help": "Held-out sessions of each curve point."})
    choice_answerer: str | None = field(default=None, metadata={
        "help": "Answerer of choice-mode scoring (None: evidence mode only; choice mode costs model calls)."})
    memory_score_world: str = field(default="{num_users: 2, num_periods: 2, rounds_update: 1, seed: 4242}",
                                    metadata={"help": "World settings (over configs/env/base.yaml) of the interactive "
                                                      "memory score; its users are never trained on. {} = off."})
    adapter_out: str | None = field(default="membuilder/policies/smollm2-135m-memgym", metadata={
        "help": "Where the first seed's ADRPO adapter ships (bf16, with card.json); None: not exported."})
    report_only: bool = field(default=False, metadata={
        "help": "Train and evaluate nothing: rewrite the results from the stages already finished in work_dir "
                "(a ladder stopped part-way reports what it has)."})
    work_dir: str = field(default="runs/ladder", metadata={"help": "Checkpoints and per-stage caches."})
    results_dir: str = field(default="results", metadata={"help": "Where ladder.json/.md/.png go."})

    def __post_init__(self) -> None:
        if self.rl_engine not in ("transformers", "vllm"):
            raise ValueError(f"rl_engine {self.rl_engine!r}: use 'transformers' or 'vllm'")
        if self.eval_engine not in ("transformers", "vllm"):
            raise ValueError(f"eval_engine {self.eval_engine!r}: use 'transformers' or 'vllm'")
        if self.vllm_kv_cache_gb < 1:
            raise ValueError(f"vllm_kv_cache_gb {self.vllm_kv_cache_gb}: vLLM's CPU engine needs at least 1 GB")
        unknown = [s for s in self.rl_stages if s not in RL_ALPHA]
        if unknown or len(set(self.rl_stages)) < len(self.rl_stages):
            raise ValueError(f"rl_stages {self.rl_stages}: name each of {list(RL_ALPHA)} at most once")
        if self.adapter_out in ("", "null", "None", "none"):  # off from the command line
            self.adapter_out = None
        for name in ("env_overrides", "memory_score_world"):
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, yaml.safe_load(value) or {})

    def construction_config(self, **extra) -> ConstructionConfig:
        return ConstructionConfig.from_yaml(self.env_config, **{**self.env_overrides, **extra})


def _stage_env(a: LadderArgs, stage_config: str, sessions: int | None, **extra) -> list[str]:
    """The stage config's env settings with the ladder's on top, in the stages' own dialect."""
    stage = yaml.safe_load(Path(stage_config).read_text(encoding="utf-8")) or {}
    merged = {**(stage.get("env_overrides") or {}), **a.env_overrides, **extra}
    out = ["--env_config", a.env_config, "--env_overrides", json.dumps(merged), "--users", a.train_users,
           "--max_prompt_tokens", str(a.max_prompt_tokens)]
    # always passed: None overrides the stage config's own cap ("None" parses back to None)
    return out + ["--max_sessions_per_user", str(sessions)]


def _log_history(folder: Path, trainer) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1), encoding="utf-8")


def train_sft(a: LadderArgs, folder: Path, callbacks=()) -> str:
    """The SFT adapter folder (trained unless a resumed ladder already has it).

    Like the RL runs, SFT saves a checkpoint every ``sft_save_steps`` updates and a stopped ladder
    resumes it from the last one: on two cores SFT alone outlasts a short sitting."""
    return _train_resumable(folder, lambda: sft.build([
        "--config", a.sft_config, "--model_name_or_path", a.model_name_or_path,
        *_stage_env(a, a.sft_config, a.sft_sessions_per_user),
        "--seed", str(a.sft_seed), "--output_dir", str(folder), "--save_policy_to", str(folder / "policy"),
        "--dataset_jsonl", str(folder / "sft_rows.jsonl"), "--num_train_epochs", str(a.sft_epochs),
        "--keep_empty_rows", str(a.sft_keep_empty_rows),
        "--learning_rate", str(a.sft_learning_rate), "--save_strategy", "steps",
        "--save_steps", str(a.sft_save_steps), "--save_total_limit", "1",
        "--gradient_accumulation_steps", str(a.sft_gradient_accumulation_steps)]), callbacks)


def train_rl(a: LadderArgs, seed: int, start: str, alpha: float, folder: Path, curve, callbacks=()) -> str:
    """ADRPO (or GRPO with alpha 1) continuing the SFT adapter at ``start``; returns the new adapter folder.

    The run saves a checkpoint every ``rl_save_steps`` steps; a stopped run resumes from its last one
    (adapter, optimizer, scheduler, data order and RNG), so a run longer than one sitting still finishes."""
    return _train_resumable(folder, lambda: adrpo.build(rl_argv(a, seed, start, alpha, folder)),
                            (*([curve] if curve is not None else []), *callbacks))


def _train_resumable(folder: Path, build, callbacks) -> str:
    """Train the stage ``build()`` makes from its last checkpoint in ``folder`` (if any), save its policy and
    log, and drop the checkpoints; a stage already trained is left as it is. Returns the adapter folder."""
    import shutil

    from transformers.trainer_utils import get_last_checkpoint

    from train.ladder.stage_clock import StageClock

    adapter = folder / "policy" / "adapter"
    if (adapter / "adapter_config.json").exists():
        return str(adapter)
    last = get_last_checkpoint(str(folder)) if folder.is_dir() else None
    trainer, _, tokenizer = build()
    for callback in (StageClock(folder, last), *callbacks):
        trainer.add_callback(callback)
        if hasattr(callback, "attach"):  # a callback that generates with the trainer's own engine
            callback.attach(trainer)
    if last:
        print(f"{folder}: resuming from {last}")
    trainer.train(resume_from_checkpoint=last)
    save_policy(trainer.model, tokenizer, folder / "policy")
    _log_history(folder, trainer)
    del trainer
    gc.collect()
    for done in folder.glob("checkpoint-*"):  # the finished adapter replaces them
        shutil.rmtree(done)
    return str(adapter)


def rl_argv(a: LadderArgs, seed: int, start: str, alpha: float, folder: Path) -> list[str]:
    """The ADRPO/GRPO stage's command line: its config with the ladder's settings on top."""
    g = a.rl_generations
    return [
        "--config", a.adrpo_config, "--model_name_or_path", start,
        *_stage_env(a, a.adrpo_config, a.rl_sessions_per_user, alpha=alpha),
        "--seed", str(seed), "--output_dir", str(folder), "--max_steps", str(a.rl_steps),
        # one generation batch per session, one micro-batch per agent prompt: the loss runs each prompt once under
        # its G completions, and holds one prompt's graph at a time (a whole session at once took over 24 GB
        # with 256-token completions)
        "--num_generations", str(g), "--per_device_train_batch_size", str(g), "--share_prompt", "true",
        "--gradient_accumulation_steps", "4", "--temperature", str(a.rl_temperature), "--top_p", "1.0",
        "--max_completion_length", str(a.max_completion_tokens),
        "--learning_rate", str(a.rl_learning_rate), "--save_strategy", "steps", "--save_steps", str(a.rl_save_steps),
        "--save_total_limit", "1", *(["--rollout_log", str(folder / "rollouts")] if a.rl_rollout_log else []),
        *(_VLLM_ROLLOUTS if a.rl_engine == "vllm" else [])]


# Colocated: the engine shares the trainer's process and its CPU cores; server mode cannot send weights on a CPU.
_VLLM_ROLLOUTS = ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_max_model_length", str(ENGINE_CONTEXT)]


def _finished(evaluate: Evaluator, folder: Path, name: str) -> bool:
    """Whether a stage has its trained adapter and both of its cached evaluations (on the ladder's engine)."""
    return ((folder / "policy" / "adapter" / "adapter_config.json").exists()
            and all(evaluate.cache(f"{name}{part}").exists() for part in ("", "-memory")))


def _train_seconds(folder: Path, elapsed: float) -> float:
    """Seconds a stage trained: its clock summed over the sittings it took (``StageClock``), else the wall
    time measured here, or, when a resumed ladder found the stage already trained (so nothing was
    measured), the trainer's own runtime from its saved log."""
    from train.ladder.stage_clock import clock_seconds

    seconds = clock_seconds(folder)
    if seconds is not None:
        return round(seconds, 1)
    path = folder / "log_history.json"
    if elapsed < 60 and path.exists():
        for entry in json.loads(path.read_text(encoding="utf-8")):
            if "train_runtime" in entry:
                return round(float(entry["train_runtime"]), 1)
    return round(elapsed, 1)


def train_curve(folder: Path) -> dict[int, float]:
    """Mean train reward (the session reward ADRPO maximises) per optimizer step, from the run's log."""
    path = folder / "log_history.json"
    return _train_rewards(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else {}


def _train_rewards(log_history: list[dict[str, Any]]) -> dict[int, float]:
    return {int(e["step"]): round(float(e["reward"]), 4) for e in log_history if "step" in e and "reward" in e}


def run_progress(folder: Path, stage: str, seed: int, start: dict[str, Any], curve_keys: list[str],
                 steps: int) -> dict[str, Any] | None:
    """Where an RL run stopped part-way stands at its last checkpoint: the step, its training time and the
    curve so far (train reward from the checkpoint's log, held-out points up to it); None without one."""
    from transformers.trainer_utils import get_last_checkpoint

    from train.ladder.stage_clock import CLOCK

    last = get_last_checkpoint(str(folder)) if folder.is_dir() else None
    if last is None:
        return None
    state = json.loads((Path(last) / "trainer_state.json").read_text(encoding="utf-8"))
    step = int(state["global_step"])
    clock = json.loads((folder / CLOCK).read_text(encoding="utf-8")) if (folder / CLOCK).exists() else {}
    partial = folder / "curve_points.partial.json"
    points = [p for p in (json.loads(partial.read_text(encoding="utf-8")) if partial.exists() else [])
              if p["step"] <= step]
    return {"stage": stage, "seed": seed, "step": step, "steps": steps,
            "train_seconds": clock.get("at_checkpoint", {}).get(Path(last).name),
            "train_signal": rl_signal(folder, until=step), "train_actions": rollout_actions(folder, until=step),
            "curve": _curve_rows(_train_rewards(state["log_history"]), {0: _subset_mean(start, curve_keys)}, points)}


def pair_seeds(work: Path, runs: list[dict[str, Any]], steps: int) -> None:
    """Give each seed's GRPO row (finished or stopped part-way) ``train_vs_adrpo``: its train reward minus ADRPO's,
    paired by step (a seed's two runs draw the same sessions), up to the step both have reached."""
    by = {(r["stage"], r["seed"]): r for r in runs}
    for (stage, seed), grpo in by.items():
        adrpo = by.get(("adrpo", seed))
        if stage != "grpo" or adrpo is None:
            continue
        until = min(adrpo.get("step", steps), grpo.get("step", steps))  # "step": where a stopped run stands
        grpo["train_vs_adrpo"] = paired_train_difference(work / f"seed{seed}" / "adrpo",
                                                         work / f"seed{seed}" / "grpo", until=until)


def _subset_mean(res: dict[str, Any], keys: list[str]) -> float:
    by_key = dict(zip(res["session_keys"], res["session_rewards"]["evidence"], strict=True))
    return round(sum(by_key[k] for k in keys) / len(keys), 4)


def make_curve(folder: Path, start: dict[str, Any], end: dict[str, Any], points: list[dict[str, float]],
               curve_keys: list[str], steps: int) -> list[dict[str, Any]]:
    """{step, train_reward, held_out_reward} per step: held-out at 0 (the SFT policy), every N, and the end
    (all on the same ``curve_keys`` sessions)."""
    ends = {0: _subset_mean(start, curve_keys), steps: _subset_mean(end, curve_keys)}
    return _curve_rows(train_curve(folder), ends, points)


def _curve_rows(train: dict[int, float], held: dict[int, float], points: list[dict[str, float]]):
    """The curve's rows: train reward per step, held-out reward at ``held``'s steps and the callback's points."""
    held = {**held, **{int(p["step"]): round(p["held_out_reward"], 4) for p in points}}
    return [{"step": s, "train_reward": train.get(s), "held_out_reward": held.get(s)}
            for s in sorted(set(train) | set(held))]


def row(stage: str, seed: int, res: dict[str, Any], users: list[str], seconds: float | None,
        curve: list[dict[str, Any]] | None = None, signal: dict[str, Any] | None = None,
        actions: dict[str, Any] | None = None, alpha: float | None = None) -> dict[str, Any]:
    """One stage's row of results/ladder.json; RL rows add their alpha, curve, ``train.ladder.rl_signal``'s summary and
    ``train.ladder.policy_actions``' reading of their rollouts."""
    return {"stage": stage, "seed": seed, "alpha": alpha, "valid_rate": res["valid_rate"], "cut_rate": res.get("cut_rate"),
            "reward_evidence": res["reward"]["evidence"], "reward_evidence_ci": res["reward_ci"]["evidence"],
            "reward_choice": res["reward"].get("choice"), "reward_choice_ci": res["reward_ci"].get("choice"),
            "task_reward_evidence": res["task_reward"]["evidence"], "held_out_users": users,
            "held_out_sessions": res["sessions"], "memory_score": res.get("memory_score"),
            "memory_score_ci": res.get("memory_score_ci"), "memory_score_cells": res.get("memory_score_cells"),
            "curve": curve or [], "train_seconds": seconds, "eval_seconds": res.get("eval_seconds"),
            "eval_engine": res.get("engine"), "train_signal": signal, "train_actions": actions,
            "held_out_actions": held_out_actions(res["outputs"]) if res.get("outputs") else None,
            # per held-out session, so two stages can be compared session by session (a paired bootstrap)
            "session_reward_evidence": dict(zip(res["session_keys"], res["session_rewards"]["evidence"], strict=True))}


def export_adapter(a: LadderArgs, stage: str, adapter: str, scores: dict[str, Any], argv: list[str]) -> Path | None:
    """The shipped policy: the adapter's weights in bfloat16 beside a card saying how it was made."""
    if not a.adapter_out:
        return None
    import torch
    from safetensors.torch import load_file, save

    out = Path(a.adapter_out)
    out.mkdir(parents=True, exist_ok=True)
    weights = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(Path(adapter) / "adapter_model.safetensors").items()}
    atomic_write_bytes(out / "adapter_model.safetensors", save(weights, metadata={"format": "pt"}))
    config = json.loads((Path(adapter) / "adapter_config.json").read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = a.model_name_or_path  # a short name: resolved on the user's machine
    (out / "adapter_config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    how = (f"SFT on world-oracle trajectories, then ADRPO (alpha {a.adrpo_alpha}), seed {a.seeds[0]}"
           if stage == "adrpo" else "SFT on world-oracle trajectories (the ladder's RL stages had not finished)")
    card = {"what": f"LoRA adapter for SmolLM2-135M-Instruct writing MemBuilder's four memories: {how}",
            "stage": stage,
            "command": recipe_command(argv), "config": recipe_config(a), "held_out": scores}
    (out / "card.json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    return out


def _scores(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("valid_rate", "reward_evidence", "reward_evidence_ci", "memory_score", "memory_score_ci",
                              "held_out_sessions", "held_out_users")}


# Settings a work folder's stages and caches do not depend on: they may change between sittings.
# eval_engine is free because the evaluation caches are named by engine.
FREE_SETTINGS = (*OUTPUT_OPTIONS, "seeds", "rl_stages", "rl_save_steps", "sft_save_steps", "rl_rollout_log", "eval_engine")


# Settings added after work folders were first made, with the value those folders ran under: a settings.json
# without one is read as having it (the committed ladder ran with VLLM_CPU_KVCACHE_SPACE=2).
ADDED_SETTINGS = {"vllm_kv_cache_gb": 2}


def made_settings(path: Path) -> dict[str, Any]:
    """The settings a work folder was made with (``settings.json``), settings added since filled in."""
    return {**ADDED_SETTINGS, **json.loads(path.read_text(encoding="utf-8"))}


def pin_engine(a: LadderArgs) -> None:
    """Give vLLM's CPU engine the ladder's KV cache size; the engines read it when they start."""
    before = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    if before is not None and before != str(a.vllm_kv_cache_gb):
        print(f"ladder: VLLM_CPU_KVCACHE_SPACE={before} in the environment; using the ladder's vllm_kv_cache_gb "
              f"{a.vllm_kv_cache_gb} so the results match the recipe's", file=sys.stderr)
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(a.vllm_kv_cache_gb)


def work_settings(a: LadderArgs) -> dict[str, Any]:
    """What the stages and caches in ``work_dir`` depend on: the ladder's settings and the text of the
    stage and world configs they read."""
    import hashlib

    out = {k: v for k, v in asdict(a).items() if k not in FREE_SETTINGS}
    for name in ("sft_config", "adrpo_config", "env_config"):
        out[f"{name}_sha256"] = hashlib.sha256(Path(getattr(a, name)).read_bytes()).hexdigest()
    return json.loads(json.dumps(out))


# What only the RL runs depend on: a ladder may take its SFT stage from a work folder that differs in these alone.
RL_SETTINGS = ("rl_steps", "rl_sessions_per_user", "rl_engine", "rl_generations", "rl_temperature",
               "rl_learning_rate", "adrpo_alpha", "curve_every", "curve_sessions", "adrpo_config_sha256")


def take_sft(a: LadderArgs, work: Path) -> None:
    """Start ``work`` from the finished SFT stage of the ladder in ``a.sft_from``: its adapter folder, its clock,
    and the base and SFT evaluations, copied once (a folder that has an SFT stage keeps it)."""
    import shutil

    src = Path(a.sft_from)
    made = src / "settings.json"
    if not made.exists():
        raise SystemExit(f"sft_from {src}: no settings.json there, so it is not a ladder's work folder")
    theirs, ours = made_settings(made), work_settings(a)
    changed = sorted(k for k in (set(theirs) | set(ours)) - set(RL_SETTINGS) if theirs.get(k) != ours.get(k))
    if changed:
        raise SystemExit(f"sft_from {src} trained SFT or evaluated under other settings ({made}): "
                         + "; ".join(f"{k} {theirs.get(k)!r} there, {ours.get(k)!r} here" for k in changed)
                         + ". Only the RL settings may differ: " + ", ".join(RL_SETTINGS) + ".")
    if not (src / "sft" / "policy" / "adapter" / "adapter_config.json").exists():
        raise SystemExit(f"sft_from {src}: its SFT stage has not finished (no sft/policy/adapter)")
    if (work / "sft").exists():
        return
    (work / "eval").mkdir(parents=True, exist_ok=True)
    for path in [*(src / "eval").glob("base*.json"), *(src / "eval").glob("sft*.json")]:
        if not (work / "eval" / path.name).exists():
            shutil.copy2(path, work / "eval" / path.name)
    if (src / "memory_score_world.json").exists() and not (work / "memory_score_world.json").exists():
        shutil.copy2(src / "memory_score_world.json", work / "memory_score_world.json")
    with atomic_dir(work / "sft") as partial:  # a copy cut short is never taken for a finished stage
        shutil.copytree(src / "sft", partial, ignore=shutil.ignore_patterns("checkpoint-*"), dirs_exist_ok=True)


def check_work_dir(a: LadderArgs, work: Path) -> None:
    """A work folder resumes only under the settings that made it: its cached evaluations and trained
    stages are keyed by stage name alone, so other settings would mix stale results into the report."""
    path = work / "settings.json"
    now = work_settings(a)
    if path.exists():
        made = made_settings(path)
        changed = sorted(k for k in set(made) | set(now) if made.get(k) != now.get(k))
        if changed:
            raise SystemExit(f"{work} was made with other settings ({path}): "
                             + "; ".join(f"{k} {made.get(k)!r} -> {now.get(k)!r}" for k in changed)
                             + ". Its stages and cached evaluations would not match them: set another work_dir, "
                               "or remove this one to start over.")
    elif not a.report_only:  # a report describes a folder; it does not claim one
        write_json(path, now)


def run(a: LadderArgs, argv: list[str]) -> list[dict[str, Any]]:
    work = Path(a.work_dir)
    check_work_dir(a, work)
    pin_engine(a)
    if a.sft_from and not a.report_only:
        take_sft(a, work)
    evaluate = Evaluator(a, work)
    rows: list[dict[str, Any]] = []
    progress: list[dict[str, Any]] = []  # RL runs a report finds stopped part-way
    timings = cached_json(work / "timings.json", dict)
    oracle = oracle_over_limit(a)
    t_start = time.perf_counter()

    def publish():
        pair_seeds(work, [*rows, *progress], a.rl_steps)
        (work / "timings.json").write_text(json.dumps(timings, indent=1), encoding="utf-8")
        write_results(a, rows, time.perf_counter() - t_start, argv, timings, oracle, progress)

    base_done = all(evaluate.cache(f"base{part}").exists() for part in ("", "-memory"))
    if a.report_only and not (base_done and _finished(evaluate, work / "sft", "sft")):
        raise FileNotFoundError(f"report_only: {work} holds no finished SFT stage to report (run the ladder first)")
    base = evaluate.cached(a.model_name_or_path, "base", "base")
    rows.append(row("base", a.sft_seed, base, evaluate.users, None))
    publish()
    t = time.perf_counter()
    sft_policy = train_sft(a, work / "sft")
    timings.setdefault("sft", _train_seconds(work / "sft", time.perf_counter() - t))
    sft_res = evaluate.cached(sft_policy, "sft", "sft")
    rows.append(row("sft", a.sft_seed, sft_res, evaluate.users, timings["sft"]))
    if not a.report_only and not (work / f"seed{a.seeds[0]}" / "adrpo" / "policy" / "adapter").exists():
        export_adapter(a, "sft", sft_policy, _scores(rows[-1]), argv)  # shipped until ADRPO replaces it
    publish()
    for seed in a.seeds:
        for stage in (s for s in RL_ALPHA if s in a.rl_stages):
            alpha = RL_ALPHA[stage] or a.adrpo_alpha
            folder = work / f"seed{seed}" / stage
            if a.report_only and not _finished(evaluate, folder, f"{stage}-{seed}"):
                partial = run_progress(folder, stage, seed, sft_res, evaluate.keys[:a.curve_sessions], a.rl_steps)
                if partial:
                    progress.append(partial)
                continue
            from train.ladder.curve_callback import CurveCallback  # subclasses transformers' TrainerCallback

            curve = CurveCallback(evaluate, a.curve_every, a.curve_sessions, f"{stage} seed {seed}",
                                  folder / "curve_points.partial.json")
            t = time.perf_counter()
            policy = train_rl(a, seed, sft_policy, alpha, folder, curve)
            timings.setdefault(f"{stage}/{seed}", _train_seconds(folder, time.perf_counter() - t))
            points = cached_json(folder / "curve_points.json", lambda c=curve: c.points)
            res = evaluate.cached(policy, f"{stage} seed {seed}", f"{stage}-{seed}")
            curve_rows = make_curve(folder, sft_res, res, points, evaluate.keys[:a.curve_sessions], a.rl_steps)
            rows.append(row(stage, seed, res, evaluate.users, timings[f"{stage}/{seed}"], curve_rows,
                            rl_signal(folder), rollout_actions(folder), alpha))
            if stage == "adrpo" and seed == a.seeds[0] and not a.report_only:  # a report ships nothing new
                export_adapter(a, stage, policy, _scores(rows[-1]), argv)
            publish()
    if progress:
        publish()
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from trl import TrlParser

    from train.ladder.report import table

    argv = list(sys.argv[1:] if argv is None else argv)
    (a,) = TrlParser((LadderArgs,)).parse_args_and_config(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    rows = run(a, argv)
    print(table(rows))
    print(f"results: {a.results_dir}/ladder.json, ladder.md, ladder.png, ladder_curves.png")
    return rows


if __name__ == "__main__":
    main()
