"""Seconds per question in the answer stage of a fixed ``memgym eval`` run, engine by engine.

The run: LoCoMo conv-26 (``../shared/data/locomo``), the ``rag`` system, the first 40 questions,
SmolLM2-135M as answerer and judge, the judge check off. It runs once per engine, each in a
fresh process and a fresh output folder: transformers in float32 (``MEMGYM_DTYPE=float32``, the
engine before this work and still the default on CPUs without AMX), transformers in bfloat16
(``hf-bf16``, the default on CPUs with AMX; not run by default), and vLLM's CPU engine (from
``.venv-vllm``, where ``smollm2-135m`` picks it). Seconds come from the
run's own ``run.json`` (stage ``answer``), so model loading is not counted.

    python bench/eval_answer_stage.py [--engines hf-fp32,vllm] [--limit 40]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from engine_python import python_for  # bench/ is the script's own folder

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10_conv-26.json"
ENGINES = {"hf-fp32": {"MEMGYM_DTYPE": "float32", "MEMGYM_ENGINE": "transformers"},
           "hf-bf16": {"MEMGYM_DTYPE": "bfloat16", "MEMGYM_ENGINE": "transformers"},
           "vllm": {"MEMGYM_ENGINE": "vllm", "VLLM_CPU_KVCACHE_SPACE": "2"}}
DEFAULT_ENGINES = "hf-fp32,vllm"


def run_engine(engine: str, limit: int) -> dict | None:
    python = python_for(engine)
    if python is None:
        return None
    out = Path(tempfile.mkdtemp(prefix=f"eval-answer-{engine}-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **ENGINES[engine]}
    if not engine.startswith("vllm"):
        env.setdefault("MEMGYM_TORCH_THREADS", "1")
    cmd = [python, "-m", "memgym_env.cli", "eval", "--benchmark", "locomo", "--data", str(DATA), "--system", "rag",
           "--limit", str(limit), "--no-judge-check", "--out", str(out)]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    run = json.loads((out / "run.json").read_text())
    last = run["invocations"][-1]
    answer = last["stages"]["answer"]
    results = json.loads((out / "results.json").read_text())
    return {"engine": engine, "runs_as": last.get("engines", {}).get("answerer"), "questions": run["questions"],
            "answer_s": round(answer["wall_s"], 1), "answer_s_per_question": round(answer["wall_s"] / run["questions"], 2),
            "prompt_tokens": answer.get("prompt_tokens"), "completion_tokens": answer.get("completion_tokens"),
            "judge_s": round(last["stages"].get("judge", {}).get("wall_s", 0.0), 1),
            "answers": [item.get("answer") for item in results["items"]],
            "load_average_at_end": list(os.getloadavg())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=DEFAULT_ENGINES, help=f"some of {', '.join(ENGINES)}")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "eval_answer_stage.json"))
    args = parser.parse_args()
    engines = {}
    for engine in args.engines.split(","):
        if engine not in ENGINES:
            raise SystemExit(f"unknown engine {engine!r}; use {sorted(ENGINES)}")
        result = run_engine(engine, args.limit)
        if result is not None:
            engines[engine] = result
            print(json.dumps({k: v for k, v in result.items() if k != "answers"}), flush=True)
    result = {"what": f"memgym eval --benchmark locomo (conv-26) --system rag --limit {args.limit}, answer stage",
              "cpu_count": os.cpu_count(), "engines": engines}
    if "hf-fp32" in engines:
        base = engines["hf-fp32"]["answer_s_per_question"]
        for engine, res in engines.items():
            result[f"answer_speedup_{engine.replace('-', '_')}"] = round(base / max(res["answer_s_per_question"], 1e-9), 2)
            same = sum(a == b for a, b in zip(res["answers"], engines["hf-fp32"]["answers"]))
            res["answers_identical_to_fp32"] = f"{same}/{len(res['answers'])}"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'engine':<10}{'s/question':>12}{'answer s':>10}{'speed-up':>10}")
    for engine, res in engines.items():
        print(f"{engine:<10}{res['answer_s_per_question']:>12.2f}{res['answer_s']:>10.1f}"
              f"{result.get('answer_speedup_' + engine.replace('-', '_'), float('nan')):>10.2f}")


if __name__ == "__main__":
    main()
