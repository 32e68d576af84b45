"""What LoRA's dropout costs an RL step on a CPU: the loss pass and the rollout log-prob pass, with and without it.

An ADRPO step runs the policy over each agent prompt's G completions twice: once without gradients
for the log-probs that the importance ratio against the generator needs, once for the loss. LoRA
(r16, all linear layers, dropout 0.05 as the SFT recipes train it) puts a dropout mask on the
input of each of its 210 adapted layers; ADRPOConfig now turns dropout off (``disable_dropout``).
This times both passes on SmolLM2-135M, on a real held-out prompt of the ladder's world cut to the
ladder's 384 tokens and G completions, alternating dropout 0.05 and 0 in one process, and checks
that two no-gradient passes agree only without dropout.

    python bench/lora_dropout.py [--dtype auto] [--generations 8] [--completion-tokens 100] [--repeats 4]
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


def main(argv=None) -> dict:
    import torch
    from agent_prompt_batch import agent_prompt_batch
    from peft import get_peft_model

    from membuilder.training.sft import lora_config
    from membuilder.training.shared_prefix import shared_prefix_logps
    from train.common import load_policy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="auto", help="the policy's base dtype: auto (what the ladder trains in), "
                                                  "bfloat16 or float32")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--completion-tokens", type=int, default=100)
    p.add_argument("--prompt-tokens", type=int, default=384)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "lora_dropout.json"))
    args = p.parse_args(argv)

    model, tok, _ = load_policy("smollm2-135m", args.dtype, frozen_base=True)
    model = get_peft_model(model, lora_config(r=16, alpha=32, dropout=0.05))
    for name, param in model.named_parameters():  # a trained adapter: B != 0, so the masks change the output
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.02, generator=torch.Generator().manual_seed(0))
    model.train()
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    g, c = args.generations, args.completion_tokens
    prompt, ids, mask = agent_prompt_batch(tok, args.prompt_tokens, g, c)

    def set_dropout(prob: float) -> None:
        for m in dropouts:
            m.p = prob

    def rollout_pass():
        t = time.perf_counter()
        with torch.no_grad():
            logps, _ = shared_prefix_logps(model, ids, mask, c)
        return time.perf_counter() - t, logps

    def loss_pass():
        model.zero_grad()
        t = time.perf_counter()
        logps, _ = shared_prefix_logps(model, ids, mask, c)
        (logps * mask[:, -c:]).sum().backward()
        return time.perf_counter() - t

    settings = {"dropout_0.05": 0.05, "dropout_0": 0.0}
    times = {k: {"rollout_logps": [], "loss": []} for k in settings}
    agree = {}
    set_dropout(0.0)
    loss_pass()  # warm-up
    for _ in range(args.repeats):
        for label, prob in settings.items():
            set_dropout(prob)
            seconds, first = rollout_pass()
            times[label]["rollout_logps"].append(round(seconds, 3))
            times[label]["loss"].append(round(loss_pass(), 3))
            _, second = rollout_pass()
            agree[label] = bool(torch.equal(first, second))
    median = {k: {part: statistics.median(v) for part, v in parts.items()} for k, parts in times.items()}
    both = {k: round(m["rollout_logps"] + m["loss"], 3) for k, m in median.items()}
    result = {
        "what": "one agent prompt's G completions through SmolLM2-135M + LoRA r16 (all linear layers): the rollout "
                "log-prob pass (no gradients) and the loss pass (forward + backward), shared prompt, LoRA dropout "
                "0.05 against 0",
        "policy_base_dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "dropout_layers": len(dropouts), "prompt_tokens": int(prompt.numel()), "generations": g,
        "completion_tokens": c, "repeats": args.repeats, "seconds": times, "median_s": median,
        "median_both_passes_s": both,
        "speedup_both_passes": round(both["dropout_0.05"] / both["dropout_0"], 2),
        "two_rollout_passes_identical": agree,
        "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()), "platform": platform.platform(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("policy_base_dtype", "median_s", "speedup_both_passes",
                                             "two_rollout_passes_identical")}, indent=1))
    return result


if __name__ == "__main__":
    main()
