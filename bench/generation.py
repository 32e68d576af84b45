"""Generation throughput of SmolLM2-135M-Instruct on this CPU, engine against engine, in one run.

Engines: transformers in float32, transformers in bfloat16 (the default on CPUs with AMX), and
vLLM's CPU engine in bfloat16 and in float32 (when ``.venv-vllm`` exists; ``make setup-vllm``).
All engines live in one process (under ``.venv-vllm`` when it exists, which has both
transformers and vLLM); the transformers engines run first, taking turns, then the vLLM ones
(an idle vLLM engine's worker keeps polling and would slow the others). Same prompts for all: about 512 prompt tokens and exactly
128 new tokens each, greedy, at batch 1, 8 and 16, for ``--rounds`` rounds, keeping each
engine's best. Throughput is generated tokens per second of wall time. The machine is shared and
noisy: taking turns spreads other jobs' load over all engines, and each row records the load
average it ran under.

    python bench/generation.py [--threads 1] [--engines hf-fp32,hf-bf16,vllm-bf16]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

from engine_python import VLLM_PYTHON  # bench/ is the script's own folder

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {"hf-fp32": ("transformers", "float32"), "hf-bf16": ("transformers", "bfloat16"),
           "vllm-bf16": ("vllm", "bfloat16"), "vllm-fp32": ("vllm", "float32")}
FILLER = ("I keep a notebook of the places I have lived, the people I met there, and the small "
          "habits I picked up along the way. ")


def prompt_of(tokenizer, index: int, tokens: int) -> list[dict[str, str]]:
    """A user message whose content is exactly ``tokens`` tokens (the chat template adds a few)."""
    text = f"Note {index}. " + FILLER * (tokens // 10)
    ids = tokenizer.encode(text, add_special_tokens=False)[:tokens - 12]
    request = " Now write a long, detailed story about these notes."
    return [{"role": "user", "content": tokenizer.decode(ids) + request}]


def load(engine: str, threads: int | None):
    from membuilder.llm import load_chat_model

    backend, dtype = ENGINES[engine]
    if backend == "vllm":
        return load_chat_model("vllm:smollm2-135m", max_model_len=2048, dtype=dtype)
    return load_chat_model("transformers:smollm2-135m", dtype=dtype, threads=threads)


def measure(model, engine: str, batch: int, prompt_tokens: int, new_tokens: int) -> dict:
    from membuilder.llm import Sampling

    if ENGINES[engine][0] == "transformers":
        model.batch_size = batch
    # Every row generates exactly new_tokens, so engines and batch sizes do equal work.
    sampling = Sampling(max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    convs = [prompt_of(model.tokenizer, i, prompt_tokens) for i in range(batch)]
    t0 = time.perf_counter()
    out = model.generate(convs, sampling)
    seconds = time.perf_counter() - t0
    tokens = sum(c.completion_tokens for c in out)
    return {"batch_size": batch, "prompt_tokens": out[0].prompt_tokens, "generated_tokens": tokens,
            "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 2),
            "load_average": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads for transformers (vLLM picks its own)")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--batch-sizes", default="1,8,16")
    parser.add_argument("--rounds", type=int, default=2, help="timed calls per engine and batch size (best kept)")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "generation.json"))
    args = parser.parse_args()
    from membuilder.llm.vllm_backend import vllm_available

    wanted = args.engines.split(",")
    if any(ENGINES.get(e, ("",))[0] == "vllm" for e in wanted) and not vllm_available():
        if VLLM_PYTHON.exists() and Path(sys.prefix).resolve() != VLLM_PYTHON.parent.parent.resolve():
            # One process holds every engine, so they can take turns on the same machine load.
            os.execv(str(VLLM_PYTHON), [str(VLLM_PYTHON), *sys.argv])
        print("no vLLM here and no .venv-vllm (make setup-vllm): measuring transformers only", file=sys.stderr)
        wanted = [e for e in wanted if ENGINES.get(e, ("",))[0] != "vllm"]
    for engine in wanted:
        if engine not in ENGINES:
            raise SystemExit(f"unknown engine {engine!r}; use {sorted(ENGINES)}")
    import torch

    from membuilder.llm import Sampling

    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    engines: dict[str, dict] = {}
    # One backend at a time: an idle vLLM engine's worker keeps polling for work and would slow
    # the transformers engines beside it. Within a backend, engines take turns at every batch
    # size and round, so load from other jobs falls on all of them.
    for backend in ("transformers", "vllm"):
        group = [e for e in wanted if ENGINES[e][0] == backend]
        models = {}
        for engine in group:
            started = time.perf_counter()
            models[engine] = load(engine, args.threads)
            models[engine].generate([prompt_of(models[engine].tokenizer, 0, 64)], Sampling(max_new_tokens=4))
            engines[engine] = {"runs_as": models[engine].engine, "load_s": round(time.perf_counter() - started, 1),
                               "results": []}
        for batch in batch_sizes:
            best: dict[str, dict] = {}
            for _ in range(args.rounds):
                for engine in group:
                    row = measure(models[engine], engine, batch, args.prompt_tokens, args.new_tokens)
                    print(json.dumps({"engine": engine, **row}), file=sys.stderr, flush=True)
                    if engine not in best or row["tokens_per_s"] > best[engine]["tokens_per_s"]:
                        best[engine] = row
            for engine in group:
                engines[engine]["results"].append(best[engine])
        for model in models.values():
            close = getattr(model, "close", None)
            if close is not None:
                close()
        del models
        gc.collect()
    tok_s = {e: {r["batch_size"]: r["tokens_per_s"] for r in res["results"]} for e, res in engines.items()}
    result = {
        "model": "smollm2-135m (SmolLM2-135M-Instruct)",
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "torch_threads_transformers": torch.get_num_threads(),
        "prompt_tokens_target": args.prompt_tokens,
        "max_new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "load_average_at_end": list(os.getloadavg()),
        "engines": engines,
    }
    for engine, key in (("hf-fp32", "hf_fp32"), ("hf-bf16", "hf_bf16"), ("vllm-bf16", "vllm_bf16"),
                        ("vllm-fp32", "vllm_fp32")):
        for b in batch_sizes:
            if b in tok_s.get(engine, {}):
                result[f"{key}_b{b}_tok_s"] = tok_s[engine][b]
    if "hf_fp32_b16_tok_s" in result:
        for key, name in (("hf_bf16_b16_tok_s", "bf16_over_fp32_b16"), ("vllm_bf16_b16_tok_s", "vllm_over_fp32_b16"),
                          ("vllm_fp32_b16_tok_s", "vllm_fp32_over_fp32_b16")):
            if key in result:
                result[name] = round(result[key] / result["hf_fp32_b16_tok_s"], 2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'engine':<11}" + "".join(f"{'b' + str(b) + ' tok/s':>12}" for b in batch_sizes))
    for engine in engines:
        print(f"{engine:<11}" + "".join(f"{tok_s[engine].get(b, float('nan')):>12.1f}" for b in batch_sizes))
    print(json.dumps({k: v for k, v in result.items() if k.endswith("_over_fp32_b16")}))


if __name__ == "__main__":
    main()
