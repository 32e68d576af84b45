"""Generation throughput of SmolLM2-135M-Instruct on this machine's CPU (transformers backend).

For batch sizes 1, 4, 8 and 16: prompts of 512 tokens, exactly 128 new tokens, greedy. Throughput
is generated tokens per second of wall time. "Sequential" is batch 1 (one conversation per
call); ``batched16_over_sequential`` is the ratio the issue asks to keep >= 3.

    python bench/generation.py [--threads 1] [--repeats 1] [--out bench/results/generation.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FILLER = ("I keep a notebook of the places I have lived, the people I met there, and the small "
          "habits I picked up along the way. ")


def prompt_of(model, index: int, tokens: int) -> list[dict[str, str]]:
    """A user message whose content is exactly ``tokens`` tokens (the chat template adds a few)."""
    text = f"Note {index}. " + FILLER * (tokens // 10)
    ids = model.tokenizer.encode(text, add_special_tokens=False)[:tokens - 12]
    request = " Now write a long, detailed story about these notes."
    return [{"role": "user", "content": model.tokenizer.decode(ids) + request}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--batch-sizes", default="1,4,8,16")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1, help="timed calls per batch size (after one warm-up)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "generation.json"))
    args = parser.parse_args()

    import torch

    from membuilder.llm import Sampling, load_chat_model

    started = time.perf_counter()
    model = load_chat_model("smollm2-135m", threads=args.threads)
    load_s = time.perf_counter() - started
    # Every row generates exactly new_tokens, so batch sizes are compared on equal work.
    sampling = Sampling(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens)
    model.generate([prompt_of(model, 0, 64)], Sampling(max_new_tokens=4))  # warm-up

    rows = []
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        model.batch_size = batch
        convs = [prompt_of(model, i, args.prompt_tokens) for i in range(batch)]
        tokens, seconds = 0, 0.0
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = model.generate(convs, sampling)
            seconds += time.perf_counter() - t0
            tokens += sum(c.completion_tokens for c in out)
        row = {"batch_size": batch, "prompt_tokens": out[0].prompt_tokens, "generated_tokens": tokens,
               "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 2)}
        print(json.dumps(row), flush=True)
        rows.append(row)

    by_batch = {r["batch_size"]: r["tokens_per_s"] for r in rows}
    result = {
        "model": "smollm2-135m (SmolLM2-135M-Instruct, float32, transformers)",
        "device": str(model.device),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "checkpoint_load_s": round(load_s, 2),
        "prompt_tokens_target": args.prompt_tokens,
        "max_new_tokens": args.new_tokens,
        "results": rows,
    }
    if 1 in by_batch and 16 in by_batch:
        result["batched16_over_sequential"] = round(by_batch[16] / by_batch[1], 2)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("checkpoint_load_s", "torch_threads")} |
                     {"batched16_over_sequential": result.get("batched16_over_sequential")}))


if __name__ == "__main__":
    main()
