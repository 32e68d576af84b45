"""How much the shared-prompt loss pass saves: one agent prompt, G completions, forward + backward.

ADRPO's loss needs the log-probs of G completions of each agent prompt. TRL runs every
(prompt + completion) row through the model; ``membuilder.training.shared_prefix`` runs the
prompt once and the completions on its cache. This times both on SmolLM2-135M with LoRA
(r16, all linear layers, as the CPU recipes train it), on a real prompt of the ladder's held-out
evaluation (the CPU world, cut to 768 tokens) and G completions of the expert's output length,
alternating the two methods, and checks they give the same log-probs.

    python bench/shared_prompt_loss.py [--generations 8] [--completion-tokens 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def per_row_logps(model, ids, mask, keep):
    """TRL's way: every row through the model in full (its padding masked)."""
    import torch

    logits = model(input_ids=ids, attention_mask=mask).logits[:, -keep - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, -keep:].unsqueeze(-1)).squeeze(-1)


def main(argv=None) -> dict:
    import torch
    from agent_prompt_batch import agent_prompt_batch
    from peft import get_peft_model

    from membuilder.training.sft import lora_config
    from membuilder.training.shared_prefix import shared_prefix_logps
    from train.common import load_policy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--completion-tokens", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "shared_prompt_loss.json"))
    args = p.parse_args(argv)

    model, tok, _ = load_policy("smollm2-135m", "float32", frozen_base=True)
    model = get_peft_model(model, lora_config(r=16, alpha=32, dropout=0.0))
    model.train()
    g, c = args.generations, args.completion_tokens
    prompt, ids, mask = agent_prompt_batch(tok, 768, g, c)
    keep = c

    def run(method):
        model.zero_grad()
        t = time.perf_counter()
        if method == "per_row":
            logps = per_row_logps(model, ids, mask, keep)
        else:
            logps, _ = shared_prefix_logps(model, ids, mask, keep)
        (logps * mask[:, -keep:]).sum().backward()
        return time.perf_counter() - t, logps.detach()

    times = {"per_row": [], "shared": []}
    last = {}
    run("shared")  # warm-up
    for _ in range(args.repeats):
        for method in ("per_row", "shared"):
            seconds, logps = run(method)
            times[method].append(round(seconds, 2))
            last[method] = logps
    m = mask[:, -keep:].bool()
    diff = float((last["per_row"][m] - last["shared"][m]).abs().max())
    result = {
        "what": "forward + backward of one agent prompt's G completions, SmolLM2-135M + LoRA r16, float32",
        "prompt_tokens": int(prompt.numel()), "generations": g, "completion_tokens": c,
        "tokens_through_model": {"per_row": int(ids.numel()), "shared": int(prompt.numel() + g * c)},
        "seconds": times, "median_s": {k: statistics.median(v) for k, v in times.items()},
        "speedup": round(statistics.median(times["per_row"]) / statistics.median(times["shared"]), 2),
        "max_abs_logp_difference": diff, "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()), "platform": platform.platform(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("tokens_through_model", "median_s", "speedup",
                                             "max_abs_logp_difference")}, indent=1))
    return result


if __name__ == "__main__":
    main()
