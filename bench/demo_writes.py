"""What the demo's memory writes cost, three ways, side by side on the same batch.

The batch is the first one the demo's constructor comparison generates: the longest ``--prompts``
of the trained policy's held-out sessions, rendered in its card's setting (640-token prompts,
256-token outputs). Each constructor (the trained policy and the released model) writes it with

- ``generate``: transformers' generate, every row kept in the batch to its longest output;
- ``rows_leave``: ``greedy_decode``, each row leaving the batch once it ends (the same tokens);
- ``rows_leave_bf16_prompt``: the same, with the prompts read by a bfloat16 twin (what
  ``memgym demo`` runs where the CPU has bfloat16 dot products).

The three take turns for ``--rounds`` rounds, keeping each one's best time, and each row records
the load average it ran under: the machine is shared. Output: ``bench/results/demo_writes.json``
and a table.

    python bench/demo_writes.py [--prompts 16] [--new-tokens 256] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("generate", "rows_leave", "rows_leave_bf16_prompt")


def batch_rows(chat, n: int) -> list[list[int]]:
    """The token ids of the demo comparison's first batch: its ``n`` longest held-out prompts."""
    from membuilder.llm.registry import TRAINED_POLICY
    from membuilder.training.policy_eval import greedy_batches, policy_prompts
    from memgym_env.demo import job as demo

    setting = demo.policy_setting(TRAINED_POLICY)
    scorer = demo.held_out_scorer(setting, demo.DEFAULT.held_out_users, demo.DEFAULT.held_out_sessions)
    prompts, _ = policy_prompts(scorer, scorer.session_keys(), chat.tokenizer, setting.get("max_prompt_tokens"))
    first = greedy_batches(prompts, n)[0]
    return [chat.render(prompts[i]) for i in first]


def run(chat, method: str, rows: list[list[int]], new_tokens: int) -> tuple[float, list[list[int]]]:
    import torch

    from membuilder.llm.greedy_decode import greedy_decode

    pad = chat.tokenizer.pad_token_id
    started = time.perf_counter()
    if method == "generate":
        width = max(map(len, rows))
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        with torch.inference_mode():
            out = chat.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                                      pad_token_id=pad, eos_token_id=sorted(chat.eos_ids))
        tokens = []
        for row in out[:, width:].tolist():
            ends = [i for i, t in enumerate(row) if t in chat.eos_ids]
            tokens.append(row[:ends[0] + 1] if ends else row)
    else:
        tokens = greedy_decode(chat.model, rows, new_tokens, eos_ids=chat.eos_ids, pad_id=pad,
                               prefill=chat.prefill_model if method == "rows_leave_bf16_prompt" else None)
    return time.perf_counter() - started, tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=16, help="rows in the batch (the demo's batch size)")
    p.add_argument("--new-tokens", type=int, default=256, help="output limit (the trained policy's card)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--models", default="smollm2-135m-memgym,smollm2-135m")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "demo_writes.json")
    a = p.parse_args(argv)
    import torch

    from membuilder.llm.registry import resolve_chat_path
    from membuilder.llm.transformers_backend import TransformersChatModel

    torch.set_num_threads(a.threads)
    result = {"cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
              "torch": torch.__version__, "threads": a.threads, "prompts": a.prompts, "new_tokens": a.new_tokens,
              "rounds": a.rounds, "models": {}}
    for spec in a.models.split(","):
        chat = TransformersChatModel(str(resolve_chat_path(spec)), name=spec, dtype="float32", threads=a.threads,
                                     prefill_dtype="bfloat16")
        rows = batch_rows(chat, a.prompts)
        best: dict[str, float] = {}
        outputs: dict[str, list[list[int]]] = {}
        loads: dict[str, float] = {}
        for _ in range(a.rounds):
            for method in METHODS:
                seconds, tokens = run(chat, method, rows, a.new_tokens)
                if seconds < best.get(method, float("inf")):
                    best[method], loads[method] = seconds, round(os.getloadavg()[0], 2)
                outputs[method] = tokens
        reference = outputs["generate"]
        result["models"][spec] = {
            "prompt_tokens": [len(r) for r in rows],
            "output_tokens": [len(t) for t in reference],
            "methods": {m: {"seconds": round(best[m], 2), "speedup_over_generate": round(best["generate"] / best[m], 2),
                            "same_tokens_as_generate": sum(t == r for t, r in zip(outputs[m], reference, strict=True)),
                            "load_average": loads[m]} for m in METHODS},
        }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{'model':24s} {'method':24s} {'seconds':>8s} {'x generate':>10s} {'same rows':>9s}")
    for spec, r in result["models"].items():
        for m, v in r["methods"].items():
            print(f"{spec:24s} {m:24s} {v['seconds']:8.1f} {v['speedup_over_generate']:10.2f} "
                  f"{v['same_tokens_as_generate']:>4d}/{len(r['output_tokens'])}")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
