"""Does bfloat16 change a decision? SmolLM2's multiple-choice answers in bf16 against float32.

The interactive evaluation (and MemoryGym-v0's choice mode) decides by the highest option
log-probability. This scores a fixed set of such prompts twice, through the same batched path
the evaluation uses (``score_options``), once with SmolLM2 in float32 and once in bfloat16, and
reports how often the chosen option agrees (goal: at least 99%), with a 95% Wilson interval,
plus the size of the log-probability differences.

Prompts: the seeded base world (configs/env/base.yaml, seed 42), users 0-4, periods 0, 2, 4, 6
and 8, every question of the user, asked as the interactive assistants ask it, with the user's
whole state at the end of that period as the memory: 250 prompts of 4 or more options.

    python bench/bf16_agreement.py [--users 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from membuilder import prompts
from membuilder.agents.assistant import SYSTEM, numbered
from membuilder.agents.choice import best_option, score_options
from membuilder.llm import load_chat_model
from membuilder.plumbing.stats import wilson
from memgym_env.world import generate_world, load_config

ROOT = Path(__file__).resolve().parents[1]
PERIODS = (0, 2, 4, 6, 8)


def scoring_prompts(users: int):
    """(prompt, number of options, index of the correct option) for the fixed set."""
    world = generate_world(load_config(str(ROOT / "configs" / "env" / "base.yaml"), overrides={"num_users": users}))
    items = []
    for user in world.users:
        for period in PERIODS:
            state = user.state_at(period)
            memory = "\n".join(f"- {name}: {value}" for name, value in sorted(state.items()))
            time_ = user.periods[period].period_end
            for q in user.qas:
                choices = [c.answer for c in q.answer_choices]
                text = prompts.render("assistant_choice", memory=memory, time=time_, question=q.query,
                                      choices=numbered(choices))
                items.append(([{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
                              len(choices), q.correct_choice(state)))
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "bf16_agreement.json"))
    args = parser.parse_args()
    items = scoring_prompts(args.users)
    convs = [c for c, _, _ in items]
    labels = [[str(i) for i in range(1, n + 1)] for _, n, _ in items]
    scores, seconds = {}, {}
    for dtype in ("float32", "bfloat16"):
        model = load_chat_model("transformers:smollm2-135m", dtype=dtype, threads=args.threads)
        started = time.perf_counter()
        scores[dtype] = score_options(model, convs, labels)
        seconds[dtype] = round(time.perf_counter() - started, 1)
        print(f"{dtype}: {len(convs)} prompts scored in {seconds[dtype]} s", flush=True)
        del model
    fp32 = [best_option(s) for s in scores["float32"]]
    bf16 = [best_option(s) for s in scores["bfloat16"]]
    agree = sum(a == b for a, b in zip(fp32, bf16))
    diffs = [abs(x - y) for a, b in zip(scores["float32"], scores["bfloat16"]) for x, y in zip(a, b)]
    keyed = [(c, a, b) for (_, _, c), a, b in zip(items, fp32, bf16) if c is not None]
    result = {
        "model": "smollm2-135m (SmolLM2-135M-Instruct), transformers",
        "prompts": len(items),
        "options_scored": len(diffs),
        "argmax_agreement": round(agree / len(items), 4),
        "argmax_agreement_ci95": [round(x, 4) for x in wilson(agree, len(items)) or (0.0, 1.0)],
        "disagreements": len(items) - agree,
        "goal": ">= 0.99",
        "logprob_abs_diff_mean": round(sum(diffs) / len(diffs), 4),
        "logprob_abs_diff_max": round(max(diffs), 4),
        "accuracy_fp32": round(sum(c == a for c, a, _ in keyed) / len(keyed), 4),
        "accuracy_bf16": round(sum(c == b for c, _, b in keyed) / len(keyed), 4),
        "seconds": seconds,
        "bf16_speedup": round(seconds["float32"] / seconds["bfloat16"], 2),
        "load_average_at_end": list(os.getloadavg()),
        "torch_threads": args.threads,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
