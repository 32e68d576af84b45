"""The interactive evaluation's acceptance run, timed: six assistants, a 2-user 3-period world, SmolLM2 on CPU.

    python bench/interactive_acceptance.py      # -> bench/results/interactive_acceptance.json

It runs what a user would type:

    memgym world generate --config configs/env/base.yaml --set num_users=2 --set num_periods=2 \\
        --set num_questions=3 --set changes_per_period=2 --set changes_jitter=0 --out OUT/world.json
    memgym evaluate --world OUT/world.json --assistant native,rag,awe,awi,membuilder,oracle \\
        --out OUT --reply-tokens 16 --write-tokens 32 --context-tokens 512 --top-k 5 --workers 2

(on-policy, template simulator, factual recall on; the two users run in two processes of one
torch thread each) and then checks what must hold by
construction: the oracle assistant's accuracy equals the upper bound, and write + read +
utilization = 1 - accuracy for every assistant. The goal is under 15 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ASSISTANTS = ("native", "rag", "awe", "awi", "membuilder", "oracle")
WORLD = {"num_users": 2, "num_periods": 2, "num_questions": 3, "changes_per_period": 2, "changes_jitter": 0}
RUN = {"reply_tokens": 16, "write_tokens": 32, "context_tokens": 512, "top_k": 5}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/interactive_acceptance", help="run folder (emptied first)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--workers", type=int, default=2, help="processes the users are split over (1: serial)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per worker (default: cores / workers)")
    p.add_argument("--result", default=str(ROOT / "bench" / "results" / "interactive_acceptance.json"))
    a = p.parse_args(argv)
    if a.threads:
        os.environ["MEMGYM_TORCH_THREADS"] = str(a.threads)
    started = time.perf_counter()
    from memgym_env.interactive.results import compare
    from memgym_env.interactive.runner import RunConfig, evaluate_one, load_run_models
    from memgym_env.interactive.workers import evaluate_parallel
    from memgym_env.world import generate_world, load_config, read_world, write_world

    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    world_path = out / "world.json"
    write_world(generate_world(load_config(ROOT / "configs" / "env" / "base.yaml", overrides=WORLD)), world_path)
    world = read_world(world_path)
    cfgs = [RunConfig(world=str(world_path), assistant=n, out=str(out / n), model=a.model, **RUN) for n in ASSISTANTS]
    load_s = time.perf_counter() - started
    if a.workers > 1:
        runs = evaluate_parallel(cfgs, a.workers, threads=a.threads)
    else:
        model, embedder, _ = load_run_models(cfgs, a.threads)
        upper: dict = {}
        runs = [evaluate_one(c, world, model, embedder, upper) for c in cfgs]
    per, checks = {}, {}
    for name, res in zip(ASSISTANTS, runs, strict=True):
        o = res["overall"]
        per[name] = {"seconds": res["wall_s"], "accuracy": o["accuracy"],
                     "upper_bound": o["upper_bound"], "memory_score": o["memory_score"],
                     "write": o["write"], "read": o["read"], "utilization": o["utilization"],
                     "factual_recall": o["factual_recall"], "unparsed_answers": o["unparsed_answers"]}
        checks[f"{name}: write+read+utilization = 1-accuracy"] = math.isclose(
            o["write"] + o["read"] + o["utilization"], 1 - o["accuracy"], abs_tol=1e-9)
    checks["oracle accuracy = upper bound"] = math.isclose(per["oracle"]["accuracy"], per["oracle"]["upper_bound"])
    table = compare([out / n for n in ASSISTANTS], plots=out / "plots")
    wall = time.perf_counter() - started
    result = {
        "world": WORLD, "run": RUN, "model": a.model, "simulator": "template", "mode": "on-policy",
        "users": len(world), "periods": len(world[0].periods),
        "workers": a.workers, "threads_per_worker": a.threads,
        "wall_s": round(wall, 1), "goal_s": 900, "within_goal": wall < 900, "load_s": round(load_s, 1),
        "seconds_note": "per assistant: seconds inside its periods, summed over users (in parallel, over workers)",
        "assistants": per, "checks": checks, "all_checks_pass": all(checks.values()),
        "cpu_count": os.cpu_count(), "load_average_at_end": os.getloadavg(), "platform": platform.platform(),
    }
    Path(a.result).parent.mkdir(parents=True, exist_ok=True)
    Path(a.result).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(table)
    print(f"\nwall {wall:.0f} s (goal 900 s); checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}"
                                                               for k, v in checks.items()))
    print(f"wrote {a.result} and {out}/plots")
    return result


if __name__ == "__main__":
    main()
