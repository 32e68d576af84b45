"""Which agent's writing moved a stage's held-out reward: one stage's outputs swapped in, one agent at a time.

    python -m train.ladder.agent_swap --config configs/train/ladder_smollm2_cpu.yaml \\
        --work_dir results/ladder-change/work --results_dir results/ladder-change       # against SFT, every RL stage

A stage's held-out reward scores four agents' outputs together, so a difference between two stages does not say
whose writing made it. On each held-out session this scores the reference stage's outputs (``--against``,
default SFT) with one agent's output replaced by the stage's, from the cached evaluations (nothing is
generated), and reports per agent that reward minus the reference's, paired over sessions with a 95% bootstrap
interval: a gain from Core beside a loss from Procedural shows up as two rows, not as their sum. Swaps do not
add up to the whole difference where agents' writes interact (an answer found in either of two memories).
Writes ``<results_dir>/agent_swap.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tqdm import tqdm

from membuilder.memory.ops import AGENTS, OPS_SCHEMA
from membuilder.plumbing.json_files import atomic_write_text, write_json
from membuilder.plumbing.stats import bootstrap_ci
from train.ladder.evaluator import Evaluator
from train.ladder.settings import RL_STAGES, parse_args


def cached_outputs(evaluate: Evaluator, name: str) -> dict[str, dict[str, str]]:
    """The held-out outputs a stage's cached evaluation holds, per session and agent."""
    path = evaluate.cache(name)
    if not path.exists():
        raise SystemExit(f"{path}: no held-out evaluation of {name!r} (run the ladder to evaluate it first)")
    res = json.loads(path.read_text(encoding="utf-8"))
    missing = [k for k in evaluate.keys if set(AGENTS) - set(res.get("outputs", {}).get(k, {}))]
    if missing:
        raise SystemExit(f"{path}: outputs of session {missing[0]!r} are missing or incomplete "
                         f"({len(missing)} of {len(evaluate.keys)} sessions): evaluated on other sessions")
    return res["outputs"]


def agent_swap(evaluate: Evaluator, stage: str, against: str = "sft") -> dict[str, Any]:
    """Per agent (and ``all``: every agent swapped), the reference's reward with the stage's output of that agent
    minus the reference's own, over the held-out sessions."""
    scorer = evaluate.scorers["evidence"]
    ours, ref = cached_outputs(evaluate, stage), cached_outputs(evaluate, against)
    rows: dict[str, list[float]] = {a: [] for a in (*AGENTS, "all")}
    reference = []
    for key in tqdm(evaluate.keys, desc=f"swap {stage} into {against}", unit="session", leave=False):
        base = ref[key]
        swapped = [{**base, a: ours[key][a]} for a in AGENTS] + [dict(ours[key])]
        r0, *rs = (c.reward for c in scorer.score(key, [base, *swapped]))
        reference.append(r0)
        for a, r in zip((*AGENTS, "all"), rs, strict=True):
            rows[a].append(r - r0)
    return {"stage": stage, "against": against, "sessions": len(evaluate.keys), "ops_schema": OPS_SCHEMA,
            "reference_reward": sum(reference) / max(1, len(reference)),
            "swaps": {a: {"mean": sum(v) / max(1, len(v)), "ci": bootstrap_ci(v)} for a, v in rows.items()}}


def table(results: list[dict[str, Any]]) -> str:
    """One row per stage, one column per agent swapped: the paired change of the reference's reward."""
    if not results:
        return "No stage to compare."
    against, n = results[0]["against"], results[0]["sessions"]
    lines = [f"The reference ({against}) with one agent's held-out outputs replaced by a stage's, minus the "
             f"reference: mean [95% CI] over {n} sessions; `all` replaces every agent (the stage minus the "
             f"reference); outputs parsed under rule {results[0]['ops_schema']} (`membuilder.memory.ops.OPS_SCHEMA`).",
             "", "| stage | " + " | ".join((*AGENTS, "all")) + " |", "|---|" + "---|" * (len(AGENTS) + 1)]
    for r in results:
        cells = [f"{s['mean']:+.3f} [{s['ci'][0]:+.3f}, {s['ci'][1]:+.3f}]" for s in r["swaps"].values()]
        lines.append(f"| {r['stage']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=True)
    p.add_argument("--against", default="sft", help="the reference stage's evaluation name (default: sft)")
    p.add_argument("--stages", nargs="*", default=None,
                   help="evaluation names to swap in (stage-seed, e.g. grpo-0); default: every RL stage evaluated")
    own, rest = p.parse_known_args(argv)
    a = parse_args(rest)
    work, out = Path(a.work_dir), Path(a.results_dir)
    evaluate = Evaluator(a, work)
    stages = own.stages if own.stages is not None else [
        f"{s}-{seed}" for s in RL_STAGES for seed in a.seeds_of(s) if evaluate.cache(f"{s}-{seed}").exists()]
    results = [agent_swap(evaluate, s, own.against) for s in stages]
    text = table(results)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "agent_swap.json", results)
    atomic_write_text(out / "agent_swap.md", text + "\n")
    print(f"written: {out / 'agent_swap.json'}, {out / 'agent_swap.md'}")
    return results


if __name__ == "__main__":
    main()
