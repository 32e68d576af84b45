"""How much the shared-prompt loss pass saves: one agent prompt, G completions, forward + backward.

ADRPO's loss needs the log-probs of G completions of each agent prompt. TRL runs every
(prompt + completion) row through the model; ``membuilder.training.shared_prefix`` runs the
prompt once and the completions on its cache. This times both on SmolLM2-135M with LoRA
(r16, all linear layers, as the CPU recipes train it), on a real prompt of the ladder's held-out
evaluation (the CPU world, cut to 384 tokens as the ladder cuts them) and G completions with the lengths of
one group of the CPU ladder's GRPO rollouts, padded to the batch's width as TRL pads them (256 tokens: in
every step some rollout reached the limit). Three ways, alternating: TRL's (every row in full), the shared
prompt over the batch's full width (``trim_padding=False``, the pass before it cut padding) and the shared
prompt cut to the group's longest completion with the head at real tokens only. It checks they give the
same log-probs at real tokens.

    python bench/shared_prompt_loss.py [--lengths 6,62,...] [--completion-tokens 256] [--repeats 3]
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
    from tqdm import tqdm

    from membuilder.training.sft import lora_config
    from membuilder.training.shared_prefix import shared_prefix_logps
    from train.common import load_policy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # a Semantic group of step 3 of the sweep's GRPO run (lr 1e-4, beta 0): mean 79 tokens against 82 over all
    # 1,024 rollouts, longest 112 against a median group's longest of 112
    p.add_argument("--lengths", default="6,62,81,83,84,99,103,112",
                   help="the G completions' real lengths (G = how many)")
    p.add_argument("--prompt-tokens", type=int, default=384)
    p.add_argument("--completion-tokens", type=int, default=256, help="the batch's completion width")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rows-per-pass", default="1,2,4",
                   help="also time the shared prompt with the completions in passes of this many, shortest first")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "shared_prompt_loss.json"))
    args = p.parse_args(argv)

    model, tok, _ = load_policy("smollm2-135m", "float32", frozen_base=True)
    model = get_peft_model(model, lora_config(r=16, alpha=32, dropout=0.0))
    model.train()
    lengths = [int(n) for n in args.lengths.split(",")]
    g, c = len(lengths), args.completion_tokens
    prompt, ids, mask = agent_prompt_batch(tok, args.prompt_tokens, g, c, lengths)
    keep = c
    methods = {"per_row": lambda: per_row_logps(model, ids, mask, keep),
               "shared_full_width": lambda: shared_prefix_logps(model, ids, mask, keep, trim_padding=False)[0],
               "shared": lambda: shared_prefix_logps(model, ids, mask, keep)[0]}
    chunked = [int(n) for n in args.rows_per_pass.split(",") if n]
    for n in chunked:
        methods[f"shared_rows{n}"] = lambda n=n: shared_prefix_logps(model, ids, mask, keep, rows_per_pass=n)[0]

    def run(method):
        model.zero_grad()
        t = time.perf_counter()
        logps = methods[method]()
        (logps * mask[:, -keep:]).sum().backward()
        return time.perf_counter() - t, logps.detach()

    times = {name: [] for name in methods}
    last = {}
    run("shared")  # warm-up
    for _ in tqdm(range(args.repeats), desc="repeats"):
        for method in methods:
            seconds, logps = run(method)
            times[method].append(round(seconds, 2))
            last[method] = logps
    m = mask[:, -keep:].bool()
    diff = max(float((last["per_row"][m] - last[k][m]).abs().max()) for k in methods if k != "per_row")
    median = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "what": "forward + backward of one agent prompt's G completions, SmolLM2-135M + LoRA r16, float32",
        "prompt_tokens": int(prompt.numel()), "generations": g, "completion_width": c, "completion_lengths": lengths,
        "tokens_through_model": {"per_row": int(ids.numel()), "shared_full_width": int(prompt.numel() + g * c),
                                 "shared": int(prompt.numel() + g * max(lengths)),
                                 **{f"shared_rows{n}": int(prompt.numel() + sum(
                                     len(part) * max(part) for part in
                                     (sorted(lengths)[i:i + n] for i in range(0, g, n)))) for n in chunked}},
        "seconds": times, "median_s": median,
        "speedup_over_per_row": {k: round(median["per_row"] / median[k], 2) for k in methods if k != "per_row"},
        "speedup_over_shared": {k: round(median["shared"] / median[k], 2) for k in methods if k.startswith("shared_rows")},
        "speedup_of_trimming": round(median["shared_full_width"] / median["shared"], 2),
        "max_abs_logp_difference": diff, "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()), "platform": platform.platform(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("tokens_through_model", "median_s", "speedup_over_per_row",
                                             "speedup_over_shared", "speedup_of_trimming", "max_abs_logp_difference")},
                     indent=1))
    return result


if __name__ == "__main__":
    main()
