"""MemoryGym-v0 cost: env overhead per session, and G=8 candidates versus one.

    python bench/env_step.py [--sessions 6] [--out bench/results/env_step.json]

* ``step_overhead_ms``: one ``step`` in evidence mode (no model): parse, fork, apply, retrieve,
  check, build the next observation. Embedding of new text is included; it is what the env adds
  around a model.
* ``g8_over_g1_without_model``: ``score_candidates`` with 8 different candidates over the time
  with 1, evidence mode.
* ``g8_over_g1_with_model``: the same in choice mode with the real SmolLM2 answerer on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from membuilder.memory.ops import Add, render_ops
from memgym_env.construction.env import MemoryGymEnv

ROOT = Path(__file__).resolve().parent.parent
WORLD = {"num_users": 1, "num_periods": 2}
NOOP = '{"operations": []}'


def variants(expert: dict[str, str]) -> list[dict[str, str]]:
    """Eight plausible, different rollouts of one session built around the expert's."""
    extra = render_ops("semantic", [Add("Weekend plans: visiting the coast | Details: mentioned in passing")])
    return [
        expert,
        expert | {"semantic": NOOP},
        expert | {"procedural": NOOP},
        expert | {"episodic": NOOP},
        expert | {"core": "not json"},
        expert | {"semantic": extra},
        {"core": expert["core"], "episodic": NOOP, "semantic": NOOP, "procedural": NOOP},
        {"core": "", "episodic": NOOP, "semantic": NOOP, "procedural": NOOP},
    ]


def time_ratio(env: MemoryGymEnv, sessions: int) -> tuple[float, float, float]:
    """Median over sessions of: 1 candidate, 8 candidates in one call, 8 candidates one call each."""
    one, eight, separate = [], [], []
    env.reset(seed=0, options={"episode": 0})
    for _ in range(sessions):
        cands = variants(env.expert_action())
        env.score_candidates(cands)  # warm the embedding cache: the embedder is not what is measured
        t = time.perf_counter()
        env.score_candidates(cands[:1])
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        env.score_candidates(cands)
        eight.append(time.perf_counter() - t)
        t = time.perf_counter()
        for c in cands:
            env.score_candidates([c])
        separate.append(time.perf_counter() - t)
        _, _, done, _, _ = env.step(cands[0])
        if done:
            break
    return statistics.median(one), statistics.median(eight), statistics.median(separate)


def step_times(env: MemoryGymEnv, sessions: int) -> list[float]:
    env.reset(seed=0, options={"episode": 0})
    times = []
    for _ in range(sessions):
        action = env.expert_action()
        t = time.perf_counter()
        _, _, done, _, _ = env.step(action)
        times.append(time.perf_counter() - t)
        if done:
            break
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "env_step.json"))
    args = parser.parse_args()

    env = MemoryGymEnv(answer_mode="evidence", world_overrides=WORLD)
    cold = step_times(env, args.sessions)  # first pass: every text goes through the embedder
    warm = step_times(env, args.sessions)  # same episode again: embeddings cached, the env's own cost
    g1, g8, sep = time_ratio(env, args.sessions)
    model_env = MemoryGymEnv(answer_mode="choice", world_overrides=WORLD)
    m1, m8, msep = time_ratio(model_env, max(2, args.sessions // 2))
    result = {
        "cpu_count": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "step_overhead_ms": round(1000 * statistics.median(warm), 2),
        "step_with_embedding_ms": round(1000 * statistics.median(cold), 2),
        "g1_ms_without_model": round(1000 * g1, 2), "g8_ms_without_model": round(1000 * g8, 2),
        "g8_separate_ms_without_model": round(1000 * sep, 2),
        "g8_over_g1_without_model": round(g8 / g1, 3), "g8_over_8_separate_without_model": round(g8 / sep, 3),
        "g1_ms_with_model": round(1000 * m1, 2), "g8_ms_with_model": round(1000 * m8, 2),
        "g8_separate_ms_with_model": round(1000 * msep, 2),
        "g8_over_g1_with_model": round(m8 / m1, 3), "g8_over_8_separate_with_model": round(m8 / msep, 3),
        "answerer": "smollm2-135m (choice mode, CPU, 1 torch thread)",
        "targets": {"g8_over_g1_with_model": 2.0, "g8_over_g1_without_model": 1.5},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for k, v in result.items():
        if k != "targets":
            print(f"{k:28s} {v}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
