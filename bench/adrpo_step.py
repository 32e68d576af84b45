"""Wall time of an ADRPO step on this CPU, split into generate / score / optimise, engine by engine.

The step is the shipped CPU recipe (configs/train/adrpo_smollm2_cpu.yaml: SmolLM2-135M with
LoRA, one session = 4 agents x G = 2 completions of up to 160 tokens, prompts up to 1,536
tokens, MemoryGym-v0's evidence reward), run for two optimizer steps in each of:

- ``hf-fp32``: the policy in float32, rollouts from transformers (the recipe before bf16);
- ``hf-bf16``: the policy's frozen base in bfloat16 under LoRA, rollouts from transformers (what
  ``dtype: auto`` picks on CPUs with AMX; not run by default);
- ``vllm``: the policy as ``dtype: auto`` picks it, rollouts from vLLM's CPU engine colocated in
  the trainer (configs/train/adrpo_smollm2_cpu_vllm.yaml; needs ``.venv-vllm``);
- ``vllm-no-skip``: the same with ``--skip_tied false``: tied agent groups keep TRL's advantages and every
  micro-batch goes through the loss, to measure what skipping the micro-batches that train nothing saves
  (only their first steps sample the same completions: TRL's float-noise advantages on tied groups move the
  no-skip run's weights, so its later draws differ);
- ``vllm-trl-ratio``: the same, with the importance ratio against vLLM from TRL's own no-gradient
  pass over the completions instead of from the loss pass (``--is_ratio_from_loss false``), to
  measure what reading it off the loss pass saves.

``--recipe ladder`` runs the training ladder's RL step instead (``train.ladder.settings.rl_argv``:
the ADRPO stage of the ladder's default settings on the engine's config: 4 sessions x 4 agents x G = 8,
prompts up to 640 tokens, completions up to 256, the prompt shared in the loss), continuing the shipped
adapter, whose outputs are as long as a trained policy's; results go to ``adrpo_step_ladder.json``.

Each runs in a fresh process. ``generate`` is everything before the reward (weight sync, the
rollouts, the log-probabilities of the sampling policy), ``score`` the session reward, and
``optimise`` the rest of the step (the loss's forward and backward passes and the update).
Per engine the JSON holds every step and the mean of the warm ones (all but each process's first).
``--rounds N`` runs the engine list N times in turn, so engines compared on this shared machine see
the same load; the warm mean then pools the rounds.

    python bench/adrpo_step.py [--engines hf-fp32,vllm] [--steps 2] [--rounds 1] [--recipe cpu|ladder]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project, for the engine's own Python too

from engine_python import python_for  # noqa: E402  (bench/ is the script's own folder)

from train.ladder.settings import LadderArgs, rl_argv  # noqa: E402

RUNS = {
    "hf-fp32": ("configs/train/adrpo_smollm2_cpu.yaml", ["--dtype", "float32"]),
    "hf-bf16": ("configs/train/adrpo_smollm2_cpu.yaml", ["--dtype", "bfloat16"]),
    "vllm": ("configs/train/adrpo_smollm2_cpu_vllm.yaml", []),
    "vllm-no-skip": ("configs/train/adrpo_smollm2_cpu_vllm.yaml", ["--skip_tied", "false"]),
    "vllm-trl-ratio": ("configs/train/adrpo_smollm2_cpu_vllm.yaml", ["--is_ratio_from_loss", "false"]),
}
DEFAULT_RUNS = "hf-fp32,vllm"


SHIPPED_ADAPTER = "membuilder/policies/smollm2-135m-memgym"


def recipe_argv(recipe: str, engine: str, out: str) -> list[str]:
    config = RUNS[engine][0]
    if recipe == "cpu":
        return ["--config", config]
    # the ladder's ADRPO stage on this engine's config, its rollouts from vLLM or from the trainer
    use_vllm = "true" if engine.startswith("vllm") else "false"
    ladder = LadderArgs(set=[f"stages.adrpo.config={config}", f"stages.adrpo.overrides.use_vllm={use_vllm}"])
    return rl_argv(ladder, "adrpo", 0, SHIPPED_ADAPTER, Path(out))


def measure(engine: str, steps: int, recipe: str = "cpu") -> dict:
    """Runs in the engine's own process."""
    import torch

    sys.path.insert(0, str(ROOT))
    from train.adrpo import build

    config, extra = RUNS[engine]
    out = tempfile.mkdtemp(prefix=f"adrpo-step-{engine}-")
    started = time.perf_counter()
    trainer, _, _ = build([*recipe_argv(recipe, engine, out), *extra, "--max_steps", str(steps),
                           "--save_strategy", "no", "--logging_steps", "1", "--output_dir", out])
    build_s = time.perf_counter() - started
    trainer.train()
    rows = []
    for h in trainer.state.log_history:
        if "time/generate" not in h:
            continue
        generate, score, step = h["time/generate"], h["time/score"], h["step_time"]
        rows.append({"step": h["step"], "generate_s": round(generate, 1), "score_s": round(score, 2),
                     "optimise_s": round(step - generate - score, 1), "step_s": round(step, 1),
                     "completion_tokens_mean": h.get("completions/mean_length"),
                     "tied_groups": h.get("reward/tied_groups"), "skipped_batches": h.get("loss/skipped_batches")})
    policy = next(p for p in trainer.model.parameters() if not p.requires_grad)
    return {"engine": engine, "recipe": recipe, "config": config, "overrides": extra, "policy_base_dtype": str(policy.dtype),
            "build_s": round(build_s, 1), "torch_threads": torch.get_num_threads(),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
            "load_average_at_end": list(os.getloadavg()), "steps": rows}


def warm_mean(results: list[dict]) -> dict:
    """Mean of the warm steps of one engine's runs: each process's first step also warms its engine up."""
    warm = [step for r in results for step in (r["steps"][1:] or r["steps"])]
    return {k: round(sum(step[k] for step in warm) / len(warm), 1)
            for k in ("generate_s", "score_s", "optimise_s", "step_s")}


def run_engine(engine: str, steps: int, recipe: str = "cpu") -> dict | None:
    python = python_for(engine)
    if python is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"  # not stdout: the engine's shutdown may print there
        subprocess.run([python, __file__, "--worker", engine, "--steps", str(steps), "--recipe", recipe,
                        "--out", str(result)], cwd=ROOT, check=True)
        return json.loads(result.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=DEFAULT_RUNS, help=f"some of {', '.join(RUNS)}")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="run the engine list this many times in turn")
    parser.add_argument("--recipe", choices=("cpu", "ladder"), default="cpu",
                        help="cpu: configs/train/adrpo_smollm2_cpu*.yaml as shipped; ladder: the training ladder's RL step")
    parser.add_argument("--worker", choices=sorted(RUNS), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help="default bench/results/adrpo_step[_ladder].json")
    args = parser.parse_args()
    if args.out is None:
        suffix = "" if args.recipe == "cpu" else f"_{args.recipe}"
        args.out = str(ROOT / "bench" / "results" / f"adrpo_step{suffix}.json")
    if args.worker:
        Path(args.out).write_text(json.dumps(measure(args.worker, args.steps, args.recipe)))
        return
    names = args.engines.split(",")
    for engine in names:
        if engine not in RUNS:
            raise SystemExit(f"unknown engine {engine!r}; use {sorted(RUNS)}")
    runs: dict[str, list[dict]] = {}
    for round_ in range(args.rounds):
        for engine in names:
            result = run_engine(engine, args.steps, args.recipe)
            if result is not None:
                result["round"] = round_
                runs.setdefault(engine, []).append(result)
                print(json.dumps({engine: warm_mean([result]), "round": round_}), flush=True)
    engines = {}
    for engine, results in runs.items():
        engines[engine] = {**results[0], "warm_mean": warm_mean(results), "warm_steps": sum(
            len(r["steps"][1:] or r["steps"]) for r in results)}
        if len(results) > 1:
            engines[engine]["rounds"] = results
    ladder = LadderArgs()
    what = ("one ADRPO step of configs/train/adrpo_smollm2_cpu.yaml (SmolLM2-135M, LoRA, G=2, 4 agents)"
            if args.recipe == "cpu" else
            f"one ADRPO step of the training ladder (SmolLM2-135M, LoRA, {ladder.stages['adrpo']['overrides'].get('sessions_per_step', 1)} "
            f"sessions x 4 agents x G={ladder.stages['adrpo']['overrides']['num_generations']}, prompts up to "
            f"{ladder.max_prompt_tokens} tokens, up to {ladder.max_completion_tokens} new tokens), continuing the shipped adapter")
    result = {"what": what, "recipe": args.recipe, "rounds": args.rounds,
              "cpu_count": os.cpu_count(), "engines": engines}
    if "hf-fp32" in engines:
        base = engines["hf-fp32"]["warm_mean"]["step_s"]
        for engine in engines:
            result[f"step_speedup_{engine.replace('-', '_')}"] = round(base / engines[engine]["warm_mean"]["step_s"], 2)
    if "vllm" in engines and "vllm-trl-ratio" in engines:
        ours, trls = engines["vllm"]["warm_mean"], engines["vllm-trl-ratio"]["warm_mean"]
        result["ratio_from_loss_step_speedup"] = round(trls["step_s"] / ours["step_s"], 2)
        result["ratio_from_loss_generate_saved_s"] = round(trls["generate_s"] - ours["generate_s"], 1)
    if "vllm" in engines and "vllm-no-skip" in engines:
        ours, full = engines["vllm"]["warm_mean"], engines["vllm-no-skip"]["warm_mean"]
        result["skip_tied_optimise_speedup"] = round(full["optimise_s"] / ours["optimise_s"], 2)
        result["skip_tied_step_speedup"] = round(full["step_s"] / ours["step_s"], 2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'engine':<16}{'generate s':>12}{'score s':>10}{'optimise s':>12}{'step s':>9}")
    for engine, res in engines.items():
        m = res["warm_mean"]
        print(f"{engine:<16}{m['generate_s']:>12.1f}{m['score_s']:>10.2f}{m['optimise_s']:>12.1f}{m['step_s']:>9.1f}")


if __name__ == "__main__":
    main()
