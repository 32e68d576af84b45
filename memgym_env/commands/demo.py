"""``memgym demo``: the main job on the embedded defaults, end to end, with a report."""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from membuilder.llm import load_chat_model
from membuilder.llm.embedders import load_embedder
from membuilder.llm.registry import TRAINED_POLICY, constructor_spec
from memgym_env.demo import job as demo
from memgym_env.demo.report import (
    as_records,
    constructor_table,
    interactive_table,
    time_line,
    wrap_whole,
    write_report,
)
from memgym_env.demo.tour import DEFAULT_DATA, run_tour

HELP = "The main job end to end: world, MemoryGym-v0, assistants, report."
EXAMPLES = """examples:
  memgym demo                          # default sizes, SmolLM2-135M on CPU, report in demo-out/
  memgym demo --quick                  # the smallest run (under 2 minutes on 2 CPU cores)
  memgym demo --policy-model smollm2-135m   # MemBuilder with the untrained SmolLM2 only (no comparison)
  memgym demo --full                   # the issue's sizes: 3 users x 4 periods, on-policy, longer outputs
  memgym demo --model openai:Qwen/Qwen3-4B@http://localhost:8000/v1 --full
  memgym demo --model /path/to/a/local/hf/model --out runs/demo-big
  memgym demo --tour                   # the memory-bank tour on LoCoMo conv-26 (no language model)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smallest sizes (1 user, 2 periods, replayed sessions)")
    size.add_argument("--full", action="store_true", help="3 users x 4 periods, on-policy, longer outputs (slow on CPU)")
    size.add_argument("--tour", action="store_true", help="only the memory-bank tour on LoCoMo (no language model)")
    p.add_argument("--model", default="smollm2-135m",
                   help="chat model spec: a registry name, a local path, or openai:NAME@URL (default smollm2-135m)")
    p.add_argument("--policy-model", default=TRAINED_POLICY,
                   help=f"MemBuilder's memory constructor where --model is SmolLM2-135M: {TRAINED_POLICY} (default: "
                        "the trained policy shipped in the package, reported beside the untrained base) or "
                        "smollm2-135m (untrained only); any other --model writes memory itself")
    p.add_argument("--embedder", default="minilm", help="embedder spec (default: minilm, offline)")
    p.add_argument("--seed", type=int, default=7, help="world seed (default 7)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: fastest on 2 shared cores)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                   help="processes the interactive evaluation's users are split over, one thread each "
                        "(default: 2 where there are 2 cores)")
    p.add_argument("--out", type=Path, default=Path("demo-out"), help="report folder (default demo-out)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo file for --tour (default conv-26)")


def run(args: argparse.Namespace) -> int:
    if args.tour:
        return run_tour(argparse.Namespace(data=args.data, sessions=4, questions=6, out=args.out / "tour",
                                           embedder=args.embedder))
    if args.threads < 1:
        raise ValueError("--threads must be at least 1")
    if args.workers < 1:
        raise ValueError("--workers must be at least 1")
    os.environ["MEMGYM_TORCH_THREADS"] = str(args.threads)
    # A float32 model reads its prompts in bfloat16 where the CPU has bfloat16 dot products: the demo's
    # prompt passes run about twice as fast there (membuilder.llm.greedy_decode). Set to "same" for exact float32.
    os.environ.setdefault("MEMGYM_PREFILL_DTYPE", "auto")
    from rich.console import Console

    preset = "quick" if args.quick else "full" if args.full else "default"
    sizes = demo.PRESETS[preset]
    started, load = time.perf_counter(), os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.out / "runs", ignore_errors=True)  # the demo's own run folders: always a fresh run
    console = Console()
    # With SmolLM2 the trained policy writes MemBuilder's memory, and the untrained base does the
    # same on the same world beside it; another --model (or --policy-model smollm2-135m) writes its own.
    constructor = constructor_spec(args.model, args.policy_model)
    compare = constructor != args.model
    with console.status(f"loading {args.model}{f', {constructor}' if compare else ''} and {args.embedder}"):
        model, embedder = load_chat_model(args.model), load_embedder(args.embedder)
        writer = load_chat_model(constructor) if compare else model
    # The trained policy's card names the setting it was trained in: the comparison runs there.
    setting = demo.policy_setting(constructor) if compare else None
    with demo.Progress([model] + ([writer] if compare else [])) as progress:
        progress.set("world", f"{sizes.users} users x {sizes.periods} periods")
        world = demo.make_world(sizes, args.out, args.seed)
        comparison = demo.compare_constructors(setting, sizes, {"untrained": (args.model, model),
                                                                "trained": (constructor, writer)},
                                               progress, workers=args.workers) if setting else None
        # A constructor with no card's setting (no packaged policy) writes the demo's own world instead,
        # beside the untrained base, in the MemoryGym-v0 table.
        rollouts = demo.rollouts(world, sizes, None if comparison else writer, progress,
                                 untrained=model if compare and not comparison else None)
        results = demo.interactive(world, sizes, model, embedder, args.model, args.out, progress,
                                   assistants=sizes.assistants, workers=args.workers, policy_model=args.policy_model,
                                   untrained=args.model if compare and sizes.compare_interactive else None,
                                   constructors={constructor: writer})
        progress.set("report", "")
        meta = {"model": args.model, "constructor": constructor, "untrained_constructor": args.model if compare else None,
                "engine": getattr(model, "engine", type(model).__name__), "embedder": args.embedder, "preset": preset, "seed": args.seed,
                "sizes": demo.sizes_dict(sizes), "workers": args.workers, "world": str(world), "cpus": os.cpu_count(),
                "load_average": [round(x, 2) for x in load], "model_calls": progress.calls(),
                "wall_s": time.perf_counter() - started, "stages": progress.stage_seconds()}
        paths = write_report(args.out, meta, rollouts, results, comparison)

    # One block per row, wrapped between figures: a table as wide as these cut every figure at 80 columns.
    # Titles are printed as text (rich wraps it at spaces); a rule would cut a long title with an ellipsis.
    width = min(console.width, 100)
    plain = {"markup": False, "highlight": False}
    console.print(f"\nMemGym demo ({preset}, {meta['wall_s']:.0f} s, {meta['model_calls']} model calls, "
                  f"{args.model} on {meta['engine']})", style="bold", **plain)
    console.print(as_records(interactive_table(results), width), soft_wrap=True, **plain)
    if comparison:
        console.print(f"\nMemBuilder's memory constructor: untrained vs trained ({len(comparison['session_keys'])} "
                      f"held-out sessions in the trained policy's setting, {comparison['max_new_tokens']} tokens)",
                      style="bold", **plain)
        console.print(as_records(constructor_table(comparison, results), width), soft_wrap=True, **plain)
        console.print(wrap_whole(comparison["verdict"], width), style="bold", soft_wrap=True, **plain)
    console.print(wrap_whole(time_line(meta["stages"]), width), soft_wrap=True, **plain)
    built = ", ".join(f"{n} {r['mean_reward']:.2f}" for n, r in rollouts.items())
    console.print(f"MemoryGym-v0 mean reward per session: {built}")
    for name, path in paths.items():
        console.print(f"  {name:20s} {path}")
    console.print("A bigger model: memgym demo --full --model openai:Qwen/Qwen3-4B@http://localhost:8000/v1 "
                  "(any OpenAI-compatible server) or --model /path/to/local/model")
    return 0
