"""``memgym evaluate``: play assistants through MemoryGym-Interactive-v0 and score their memory."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from membuilder.agents.assistants import ASSISTANTS
from membuilder.agents.membuilder_assistant import MEMORY_VIEWS
from memgym_env.interactive.results import compare
from memgym_env.interactive.runner import RunConfig, evaluate_one, load_constructor, load_run_models
from memgym_env.interactive.workers import evaluate_parallel
from memgym_env.world import read_world

HELP = "Evaluate assistants on a user world with simulated users (resumable; --replay for off-policy)."

EXAMPLES = """examples:
  memgym world generate --config configs/env/base.yaml --set num_users=2 --set num_periods=3 --out world.json
  memgym evaluate --world world.json --assistant native --model smollm2-135m --out runs/native
  memgym evaluate --world world.json --assistant native,rag,awe,awi,membuilder,oracle --out runs/all
  memgym evaluate --world world.json --assistant membuilder --policy-model smollm2-135m --out runs/untrained
  memgym evaluate --world world.json --assistant membuilder --memory-view live --out runs/membuilder-live
  memgym evaluate --world world.json --assistant rag,oracle --workers 2 --out runs/two-cores
  memgym evaluate --world world.json --assistant rag --replay runs/native --out runs/rag-off
  memgym evaluate --world world.json --assistant mem0,mem0-infer --out runs/mem0   # pip install 'memgym[peers]'
  memgym evaluate --world world.json --assistant awi --evolve complete --out runs/awi-evolve
  memgym report runs/all/* runs/rag-off

With a SmolLM2 --model, membuilder writes memory with the trained policy smollm2-135m-memgym
(shipped in the package) and answers with --model; --policy-model smollm2-135m gives the untrained base.
Run the same command again to resume after the last finished period of each user.
Each run folder gets results.json, report.txt and plots/ (memory score, failures by cause).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    choices = {"simulator": ("template", "llm"), "evolve": ("none", "question-only", "complete"),
               "memory_view": MEMORY_VIEWS}
    for f in dataclasses.fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        required = f.default is dataclasses.MISSING
        help_text = f.metadata.get("help", "")
        if f.type in (bool, "bool"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
            continue
        kind = int if f.type in (int, "int", "int | None") else str
        parser.add_argument(flag, type=kind, required=required, choices=choices.get(f.name),
                            default=None if required else f.default,
                            help=help_text + ("" if required or f.default is None else f" (default: {f.default})"))


def run(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.assistant.split(",") if n.strip()]
    unknown = [n for n in names if n not in ASSISTANTS]
    if unknown or not names:
        raise ValueError(f"--assistant: unknown {unknown or args.assistant!r}; choose from {', '.join(ASSISTANTS)}")
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    base = {k: v for k, v in vars(args).items() if k in fields}
    outs = [args.out if len(names) == 1 else str(Path(args.out) / name) for name in names]
    cfgs = [RunConfig(**(base | {"assistant": n, "out": o})) for n, o in zip(names, outs, strict=True)]
    if args.workers > 1:
        evaluate_parallel(cfgs, args.workers, threads=args.threads)
    else:
        world = read_world(args.world)
        if args.threads:
            os.environ["MEMGYM_TORCH_THREADS"] = str(args.threads)
        model, embedder, checker = load_run_models(cfgs, args.threads)
        upper_cache: dict = {}  # the upper bound depends on the model and world only: shared by the runs
        constructors: dict = {}  # membuilder's memory-writing models by spec
        for cfg in cfgs:
            evaluate_one(cfg, world, model, embedder, upper_cache, checker=checker,
                         constructor=load_constructor(cfg, model, args.threads, constructors))
    print(compare(outs, plots=Path(args.out) / "plots" if len(names) > 1 else None))
    return 0
