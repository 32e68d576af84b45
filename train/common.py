"""Wiring shared by the training entry points: worlds -> sessions, oracle outputs, models, scorers.

This is the only training code that imports ``memgym_env``; the reusable pieces in
``membuilder.training`` receive what they need from here.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from membuilder.agents.constructor import build_observation
from membuilder.llm.embedders import load_embedder
from membuilder.llm.loading import load_causal_lm
from membuilder.llm.registry import resolve_chat_path
from membuilder.llm.transformers_backend import cpu_bf16_is_fast
from membuilder.llm.vllm_backend import release_engine
from membuilder.memory import EmbeddingCache
from membuilder.training.checkpoints import save_policy
from membuilder.training.memory_estimate import require_fit, trainer_estimate
from membuilder.training.sft import lora_config
from membuilder.training.trajectories import write_jsonl
from memgym_env.benchmarks.runner import EvalConfig
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.episodes import Episode, expert_snapshots, load_episodes
from memgym_env.construction.scoring import SESSION_PICKS, pick_sessions
from memgym_env.world.user_ranges import parse_users  # noqa: F401  (the trainers and ladder read users from here)
from train.benchmark_callback import BenchmarkEvalCallback


@dataclass
class EnvArgs:
    """Which MemoryGym-v0 world and which of its users a stage reads (users are numbered from 0).

    ``env_config`` is an env config (``configs/env/construction.yaml`` or a sibling) and
    ``env_overrides`` overrides it with ``ConstructionConfig``'s own field names, so a training
    config never restates an env setting under another name. SFT, RL and evaluation that name
    the same settings read the same world, built once per process.
    """

    env_config: str = field(default="configs/env/construction.yaml", metadata={
        "help": "MemoryGym-v0 config (YAML of ConstructionConfig fields)."})
    env_overrides: str = field(default="{}", metadata={
        "help": "ConstructionConfig fields over env_config: a YAML mapping in a config file, JSON on the command "
                "line (it replaces the file's mapping)."})
    users: str = field(default="0-9", metadata={"help": "Users (episodes) to read, e.g. '0-9' or '0,2,5'."})
    max_sessions_per_user: int | None = field(default=None, metadata={
        "help": "Keep N sessions of each user (which N: session_pick); None keeps them all."})
    session_pick: str = field(default="first", metadata={
        "help": "Which max_sessions_per_user sessions of each user: 'first' (the first N), or 'every_period' (N spread "
                "over every period, each period's earliest first)."})

    def __post_init__(self) -> None:
        if isinstance(self.env_overrides, str):
            self.env_overrides = yaml.safe_load(self.env_overrides) or {}
        if not isinstance(self.env_overrides, dict):
            raise ValueError(f"env_overrides must be a mapping of ConstructionConfig fields; got {self.env_overrides!r}")
        if self.session_pick not in SESSION_PICKS:
            raise ValueError(f"session_pick {self.session_pick!r}; expected one of {SESSION_PICKS}")
        if hasattr(super(), "__post_init__"):  # script args mix EnvArgs with BenchmarkEvalArgs
            super().__post_init__()

    def construction_config(self) -> ConstructionConfig:
        return ConstructionConfig.from_yaml(self.env_config, **self.env_overrides)


@dataclass
class BenchmarkEvalArgs:
    """A LoCoMo / LongMemEval / PerLTQA sample scored with the policy every N optimizer steps.

    ``benchmark_eval`` holds ``memgym eval``'s own fields (``EvalConfig``: benchmark, data, system,
    limit, answerer, judge, ...); left empty, nothing is evaluated. The policy plays the roles in
    ``benchmark_eval_roles``; the other roles load from the mapping's model specs once. Scores are
    logged as ``eval/<benchmark>/<category>`` through the trainer, and each evaluation writes into
    ``<out>/step-<n>`` (``out`` defaults to ``<output_dir>/benchmark_eval``).
    """

    benchmark_eval: str = field(default="{}", metadata={
        "help": "EvalConfig fields of the benchmark sample to evaluate during training: a YAML mapping in a config "
                "file, JSON on the command line; out defaults to <output_dir>/benchmark_eval; empty: no evaluation."})
    benchmark_eval_steps: int = field(default=100, metadata={"help": "Evaluate every N optimizer steps."})
    benchmark_eval_roles: str = field(default="model", metadata={
        "help": "Roles the policy plays, comma-separated: model (the membuilder system's memory constructor), "
                "answerer, judge."})

    def __post_init__(self) -> None:
        if isinstance(self.benchmark_eval, str):
            self.benchmark_eval = yaml.safe_load(self.benchmark_eval) or {}
        if not isinstance(self.benchmark_eval, dict):
            raise ValueError(f"benchmark_eval must be a mapping of EvalConfig fields; got {self.benchmark_eval!r}")
        if hasattr(super(), "__post_init__"):
            super().__post_init__()


def add_benchmark_eval(trainer, script: BenchmarkEvalArgs):
    """Attach the benchmark callback to ``trainer`` when ``script.benchmark_eval`` is set; returns it (or None)."""
    if not script.benchmark_eval:
        return None
    fields = {"out": str(Path(trainer.args.output_dir) / "benchmark_eval"), **script.benchmark_eval}
    try:
        config = EvalConfig(**fields)
    except TypeError as exc:
        raise SystemExit(f"benchmark_eval: {exc}; its keys are memgym eval's EvalConfig fields "
                         f"(see docs/configuration.md)") from exc
    roles = tuple(r.strip() for r in script.benchmark_eval_roles.split(",") if r.strip())
    unknown = set(roles) - {"model", "answerer", "judge"}
    if unknown:
        raise SystemExit(f"benchmark_eval_roles: {sorted(unknown)} are not roles; expected model, answerer, judge")
    callback = BenchmarkEvalCallback(config, every_n_steps=script.benchmark_eval_steps, policy_roles=roles)
    trainer.add_callback(callback)
    return callback.attach(trainer)


def train_and_finish(trainer, save_policy_to: str | None, tokenizer):
    """Train (resuming when asked), write the policy from the main process, then leave together.

    Every process waits for the save, and the process group is torn down before the interpreter
    exits: a gloo worker that exits with its group alive can abort in C++ teardown ("terminate
    called without an active exception", SIGABRT) after a run that trained fine.
    """
    check_memory(trainer)
    trainer.train(resume_from_checkpoint=trainer.args.resume_from_checkpoint)
    if save_policy_to and trainer.accelerator.is_main_process:
        print(save_policy(trainer.model, tokenizer, save_policy_to))
    trainer.accelerator.wait_for_everyone()
    close_colocated_engine(trainer)
    trainer.accelerator.end_training()
    return trainer


def close_colocated_engine(trainer) -> None:
    """Stop a colocated vLLM engine while the process group it was built in still exists: left to
    the interpreter's exit, its shutdown runs after ``end_training`` has torn the group down and
    prints a ValueError traceback ("Invalid process group specified") after a run that trained fine.
    The engine's model is freed with it (``release_engine``), so runs that follow in this process start clean."""
    generation = getattr(trainer, "vllm_generation", None)
    if getattr(generation, "llm", None) is None:
        return
    release_engine(generation.llm)
    generation.llm = None


def check_memory(trainer) -> None:
    """On a CUDA device, stop before the first step when the run's estimated peak memory exceeds the
    device's (``membuilder.training.memory_estimate``); CPU runs, and MEMGYM_MEMORY_CHECK=off, skip it."""
    import torch

    if os.environ.get("MEMGYM_MEMORY_CHECK", "on") == "off" or trainer.args.device.type != "cuda":
        return
    device = trainer.args.device
    est = trainer_estimate(trainer, torch.cuda.get_device_properties(device).total_memory)
    require_fit(est, f"{trainer.args.output_dir} on {torch.cuda.get_device_name(device)}")


def chosen_episodes(config: ConstructionConfig, users: list[int]) -> list[Episode]:
    episodes = load_episodes(config)
    for u in users:
        if not 0 <= u < len(episodes):
            raise ValueError(f"user {u} asked for, but the world has {len(episodes)} users "
                             f"(world_overrides={config.world_overrides}, world_path={config.world_path})")
    return [episodes[u] for u in users]


def session_periods(ep: Episode) -> list[int]:
    """Each session's period, as ``SessionScorer`` reads it (0 where a session names none)."""
    return [int(s.meta.get("period", 0) or 0) for s in ep.conversation.sessions]


def first_period_keep(periods: list[int], keep: list[int], n: int) -> list[int]:
    """``keep`` and the first ``n`` sessions of the earliest period, in order. Those sessions bring the
    user's facts into a memory that is still filling up, so the expert ADDs there; a pick spread over
    every period takes two of a world user's ten, and a policy trained on it edits where it should add."""
    if n < 0:
        raise ValueError(f"first_period must be at least 0, got {n}")
    if not n or not periods:
        return keep
    first = [j for j, p in enumerate(periods) if p == min(periods)][:n]
    return sorted(set(keep) | set(first))


def expert_records(config: ConstructionConfig, users: list[int], limit: int | None = None,
                   jsonl: str | None = None, pick: str = "first", first_period: int = 0) -> list[dict[str, Any]]:
    """The expert's (the world oracle's) trajectory for each chosen user: per session the
    observation on the expert's own memory and the four outputs, keyed as the env's scorer keys them;
    ``limit`` sessions of each user, picked as ``SessionScorer`` picks them (``pick``), and besides
    them the user's first ``first_period`` sessions of its first period (``first_period_keep``)."""
    cache = EmbeddingCache(load_embedder(config.embedder))
    records = []
    for ep in chosen_episodes(config, users):
        periods = session_periods(ep)
        keep = first_period_keep(periods, pick_sessions(periods, limit, pick), first_period)
        snapshots = expert_snapshots(ep, cache, max(keep) + 1 if keep else 0)
        for j in keep:
            bank, s = snapshots[j], ep.conversation.sessions[j]
            records.append({"key": f"{ep.conversation.id}/{s.id}", "time": s.time, "source": "oracle",
                            "observation": build_observation(bank, s.render(), s.time, config.view_k,
                                                             config.write_live),
                            "outputs": dict(ep.expert_outputs[j])})
    if jsonl:
        write_jsonl(records, jsonl)
    return records


def require_vllm(use_vllm: bool, mode: str = "colocate") -> None:
    """Fail at start, with the fix, when a config asks for vLLM that is not installed or cannot run here."""
    if not use_vllm:
        return
    if importlib.util.find_spec("vllm") is None:
        raise SystemExit("this config sets use_vllm: true, but vLLM is not installed. On a CUDA machine install it "
                         "(`pip install -e '.[gpu]'`); on a CPU run from .venv-vllm (`make setup-vllm`, then "
                         "`.venv-vllm/bin/python train/...`); or set use_vllm: false to generate with transformers.")
    import torch

    if mode == "server" and not torch.cuda.is_available():
        raise SystemExit("this config sets vllm_mode: server, which a CPU cannot run: TRL sends the weights to the "
                         "vLLM server over NCCL, which needs CUDA GPUs. On a CPU use vllm_mode: colocate (the engine "
                         "runs inside the trainer, e.g. configs/train/adrpo_smollm2_cpu_vllm.yaml).")


def policy_dtype(dtype: str | None, frozen_base: bool):
    """The dtype a policy trains in. ``auto``: bfloat16 on a GPU; on a CPU with bf16 hardware
    (AMX) bfloat16 only under LoRA, where the frozen base runs several times faster in bf16 and
    the adapter (PEFT keeps it in float32) takes the updates; a fully trained model stays float32
    there, since bf16 weights would round away small optimizer steps."""
    import torch

    if dtype not in (None, "auto"):
        return getattr(torch, dtype)
    if torch.cuda.is_available():
        return torch.bfloat16
    return torch.bfloat16 if frozen_base and cpu_bf16_is_fast() else torch.float32


def full_checkpoint(path: str) -> str:
    """``path`` itself, or for a LoRA adapter folder (save_policy's adapter/) the base it was trained on."""
    adapter = Path(path) / "adapter_config.json"
    if not adapter.is_file():
        return path
    return resolve_chat_path(json.loads(adapter.read_text(encoding="utf-8"))["base_model_name_or_path"])


def load_policy(model_name_or_path: str, dtype: str | None = None, frozen_base: bool = False):
    """Model and tokenizer from a short name (``smollm2-135m``), a local folder or a hub id.
    ``frozen_base``: only adapters will train (LoRA), which lets ``dtype: auto`` pick bfloat16."""
    from transformers import AutoTokenizer

    path = resolve_chat_path(model_name_or_path)
    adapter = Path(path) / "adapter_config.json"
    if adapter.is_file():
        # A LoRA adapter folder (save_policy's adapter/): its base with the adapter on top, still
        # trainable, so a later stage (ADRPO after SFT) keeps training the one adapter.
        from peft import PeftModel

        base = full_checkpoint(path)
        model = load_causal_lm(base, dtype=policy_dtype(dtype, True))
        model = PeftModel.from_pretrained(model, path, is_trainable=True)
        tokenizer = AutoTokenizer.from_pretrained(path if (Path(path) / "tokenizer_config.json").is_file() else base)
    else:
        model = load_causal_lm(path, dtype=policy_dtype(dtype, frozen_base))
        tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, path


def peft_from(model_args, model=None):
    """The LoRA config of a run, or None: no PEFT, or ``model`` already carries its trainable adapter."""
    if not model_args.use_peft or hasattr(model, "peft_config"):
        return None
    return lora_config(r=model_args.lora_r, alpha=model_args.lora_alpha, dropout=model_args.lora_dropout,
                       target_modules=model_args.lora_target_modules or "all-linear")
