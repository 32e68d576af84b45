"""Wiring shared by the training entry points: worlds -> sessions, oracle outputs, models, scorers.

This is the only training code that imports ``memgym_env``; the reusable pieces in
``membuilder.training`` receive what they need from here.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

from membuilder.training.trajectories import SessionText


@dataclass
class WorldArgs:
    """Which world and which of its users a stage reads (users are numbered from 0)."""

    world_config: str = field(default="configs/env/base.yaml", metadata={"help": "World generator config (YAML)."})
    world_path: str | None = field(default=None, metadata={"help": "A data.json world instead of generating one."})
    world_seed: int | None = field(default=None, metadata={"help": "Override the world config's seed."})
    num_users: int | None = field(default=None, metadata={"help": "Override how many users the world has."})
    users: str = field(default="0-9", metadata={"help": "Users to read, e.g. '0-9' or '0,2,5'."})
    max_sessions_per_user: int | None = field(default=None, metadata={"help": "Keep the first N sessions of each user."})


def parse_users(spec: str) -> list[int]:
    out: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def load_world(args: WorldArgs):
    from memgym_env.world import generate_world, load_config, read_world

    if args.world_path:
        return read_world(args.world_path)
    overrides: dict[str, Any] = {}
    if args.world_seed is not None:
        overrides["seed"] = args.world_seed
    if args.num_users is not None:
        overrides["num_users"] = args.num_users
    return generate_world(load_config(args.world_config, overrides=overrides or None))


def user_sessions(user, uid: str, limit: int | None = None) -> list[SessionText]:
    from memgym_env.world import user_to_conversation

    conv = user_to_conversation(user)
    sessions = [SessionText(f"{uid}/{s.id}", s.time, s.render()) for s in conv.sessions]
    return sessions[:limit] if limit else sessions


def oracle_outputs(user, uid: str) -> dict[str, dict[str, str]]:
    from memgym_env.world import expert_steps

    return {f"{uid}/{step.session_id}": step.outputs for step in expert_steps(user)}


def world_expert_records(world, users: list[int], embedder, view_k: int = 20, limit: int | None = None,
                         jsonl: str | None = None) -> list[dict[str, Any]]:
    """The oracle's trajectory for each chosen user, each from an empty expert memory."""
    from membuilder.memory.bank import MemoryBank
    from membuilder.training.trajectories import build_trajectory, outputs_writer

    records = []
    for i in users:
        if i >= len(world):
            raise ValueError(f"user {i} asked for, but the world has {len(world)} users")
        user, uid = world[i], f"u{i:03d}"
        sessions = user_sessions(user, uid, limit)
        records += build_trajectory(sessions, outputs_writer(oracle_outputs(user, uid)), MemoryBank(embedder),
                                    view_k=view_k, jsonl=jsonl, source="oracle")
    return records


def require_vllm(use_vllm: bool) -> None:
    """Fail at start, with the fix, when a config asks for vLLM that is not installed."""
    if use_vllm and importlib.util.find_spec("vllm") is None:
        raise SystemExit("this config sets use_vllm: true, but vLLM is not installed. Install it on a CUDA machine "
                         "(`pip install -e '.[gpu]'`) or set use_vllm: false to generate with transformers.")


def load_policy(model_name_or_path: str, dtype: str | None = None):
    """Model and tokenizer from a short name (``smollm2-135m``), a local folder or a hub id."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from membuilder.llm.registry import resolve_chat_path

    path = resolve_chat_path(model_name_or_path)
    torch_dtype = getattr(torch, dtype) if dtype and dtype != "auto" else (dtype or None)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, path


def peft_from(model_args):
    if not model_args.use_peft:
        return None
    from membuilder.training.sft import lora_config

    return lora_config(r=model_args.lora_r, alpha=model_args.lora_alpha, dropout=model_args.lora_dropout,
                       target_modules=model_args.lora_target_modules or "all-linear")
