"""Wall time of one stage evaluation of the training ladder, engine by engine, and how far the
engines agree.

The evaluation is the ladder's own (``train.ladder.evaluator.Evaluator``: the held-out sessions of
configs/train/ladder_smollm2_cpu.yaml, four agents each, greedy, up to 256 new tokens, prompts up
to 384 tokens), of one policy, run in a fresh process per engine:

- ``transformers``: the policy in the dtype ``auto`` picks (bfloat16 on CPUs with AMX), generated in
  batches of ``eval_batch_size`` with left padding;
- ``vllm``: vLLM's CPU engine, all prompts in one call (needs ``.venv-vllm``).

``--memory`` adds the interactive memory score (minutes more per engine). The policy defaults to
the shipped adapter (``smollm2-135m-memgym``), whose outputs are as long as a trained policy's; pass
a ladder stage's ``policy/adapter`` folder to time that stage. The JSON holds, per engine, the
seconds, the evidence reward with its interval, validity and cut rates, and across engines the
share of outputs that are the same text and the paired reward difference (vllm - transformers)
with a bootstrap interval over sessions: bfloat16 greedy decoding on two engines is expected to
part ways on some outputs, and this says how much that moves the score.

    python bench/ladder_eval.py [--engines transformers,vllm] [--policy smollm2-135m-memgym] [--memory]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, for the engine's own Python too

from engine_python import python_for  # bench/ is the script's own folder

from membuilder.plumbing.stats import paired_difference
from train.ladder.evaluator import Evaluator
from train.ladder.settings import LadderArgs

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("transformers", "vllm")


def measure(engine: str, policy: str, memory: bool, sessions_per_user: int | None) -> dict:
    """Runs in the engine's own process."""
    a = LadderArgs(eval_engine=engine, **({} if memory else {"memory_score_world": {}}),
                   **({"eval_sessions_per_user": sessions_per_user} if sessions_per_user else {}))
    with tempfile.TemporaryDirectory(prefix=f"ladder-eval-{engine}-") as work:
        evaluate = Evaluator(a, Path(work))
        started = time.perf_counter()
        res = evaluate.cached(policy, f"bench {engine}", "bench")
        seconds = time.perf_counter() - started
    return {"engine": engine, "policy": policy, "seconds": round(seconds, 1), "eval_seconds": res["eval_seconds"],
            "memory_score_seconds": res.get("memory_score_seconds"), "sessions": res["sessions"],
            "reward_evidence": round(res["reward"]["evidence"], 4), "reward_evidence_ci": res["reward_ci"]["evidence"],
            "valid_rate": res["valid_rate"], "cut_rate": res["cut_rate"], "memory_score": res.get("memory_score"),
            "memory_score_ci": res.get("memory_score_ci"), "session_keys": res["session_keys"],
            "session_rewards": res["session_rewards"]["evidence"], "outputs": res["outputs"],
            "load_average_at_end": list(os.getloadavg())}


def run_engine(engine: str, policy: str, memory: bool, sessions_per_user: int | None) -> dict | None:
    python = python_for(engine)
    if python is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"  # not stdout: the engine's shutdown may print there
        subprocess.run([python, __file__, "--worker", engine, "--policy", policy, "--out", str(result),
                        *(["--memory"] if memory else []),
                        *(["--sessions_per_user", str(sessions_per_user)] if sessions_per_user else [])],
                       cwd=ROOT, check=True)
        return json.loads(result.read_text())


def agreement(a: dict, b: dict) -> dict:
    """Same-text share over all outputs and the paired reward difference b - a over sessions."""
    keys = a["session_keys"]
    assert keys == b["session_keys"]
    same = [a["outputs"][k][agent] == b["outputs"][k][agent] for k in keys for agent in a["outputs"][k]]
    d = paired_difference(dict(zip(keys, a["session_rewards"], strict=True)),
                          dict(zip(keys, b["session_rewards"], strict=True)), keys)
    return {"same_text_share": round(sum(same) / len(same), 3), "outputs": len(same),
            "reward_difference": d["mean"], "reward_difference_ci": d["ci"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"some of {', '.join(ENGINES)}")
    parser.add_argument("--policy", default="smollm2-135m-memgym", help="a short name, checkpoint or adapter folder")
    parser.add_argument("--memory", action="store_true", help="also the interactive memory score")
    parser.add_argument("--sessions_per_user", type=int, default=None, help="default: the ladder's")
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ladder_eval.json"))
    args = parser.parse_args()
    if args.worker:
        Path(args.out).write_text(json.dumps(measure(args.worker, args.policy, args.memory, args.sessions_per_user)))
        return
    engines = {}
    for engine in args.engines.split(","):
        if engine not in ENGINES:
            raise SystemExit(f"unknown engine {engine!r}; use {list(ENGINES)}")
        res = run_engine(engine, args.policy, args.memory, args.sessions_per_user)
        if res is not None:
            engines[engine] = res
            print(json.dumps({engine: {k: res[k] for k in ("seconds", "eval_seconds", "reward_evidence")}}), flush=True)
    result = {"what": "one stage evaluation of the training ladder (held-out sessions, 4 agents, greedy, up to 256 "
                      "new tokens" + ("; plus the interactive memory score" if args.memory else "") + ")",
              "policy": args.policy, "cpu_count": os.cpu_count(),
              "engines": {e: {k: v for k, v in r.items() if k not in ("outputs", "session_keys", "session_rewards")}
                          for e, r in engines.items()}}
    if set(engines) == set(ENGINES):
        t, v = engines["transformers"], engines["vllm"]
        result["eval_speedup_vllm"] = round(t["eval_seconds"] / v["eval_seconds"], 2)
        result["agreement"] = agreement(t, v)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'engine':<14}{'held-out s':>11}{'memory s':>10}{'reward':>8}  95% CI")
    for engine, r in engines.items():
        mem = r["memory_score_seconds"]
        print(f"{engine:<14}{r['eval_seconds']:>11.1f}{(mem if mem is not None else float('nan')):>10.1f}"
              f"{r['reward_evidence']:>8.3f}  {r['reward_evidence_ci']}")
    if "agreement" in result:
        print(json.dumps(result["agreement"]))


if __name__ == "__main__":
    main()
