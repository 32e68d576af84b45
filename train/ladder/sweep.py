"""A short measured sweep of RL settings on a ladder's SFT stage: which KL beta and learning rate to train with.

    python -m train.ladder.sweep --config configs/train/ladder_smollm2_cpu.yaml --sft_from runs/ladder \\
        --grid learning_rate=1e-4,3e-5 beta=0,0.02 --steps 8

Each point of the grid is one RL run of ``--stage`` (GRPO by default, the stage that does not depend on the
attribution rule) for ``--steps`` steps from the SFT stage of the ladder in ``--sft_from``, an ablation of that
ladder in its own work folder (resumable, like any ladder), judged on the ladder's held-out sessions. The table
gives each point's held-out reward, its gain over SFT paired by session with a 95% interval, its valid JSON share
and its edit share where a needed value changed, so the choice is read off measurements; ``sweep.json`` holds them.
A point skips the interactive score and the grounding on a real dialogue unless ``--full_eval``.
``--report_only`` rewrites the table from the points already finished (their ``<out>/<point>/ladder.json``) and
trains nothing, so a sweep whose last points were never run still says what the others showed.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

from membuilder.plumbing.json_files import atomic_write_text, write_json
from membuilder.plumbing.stats import against_zero, paired_difference
from train.ladder import run as ladder


def grid_points(grid: list[str]) -> list[dict[str, Any]]:
    """``["learning_rate=1e-4,3e-5", "beta=0,0.02"]`` as every combination, in the order given."""
    axes = []
    for spec in grid:
        name, sep, values = spec.partition("=")
        if not sep or not name.strip() or not values.strip():
            raise SystemExit(f"--grid {spec!r}: give FIELD=V1,V2,... (a field of the RL stage's config)")
        axes.append([(name.strip(), float(v)) for v in values.split(",") if v.strip()])
    return [dict(combo) for combo in itertools.product(*axes)]


def point_name(point: dict[str, Any]) -> str:
    return "_".join(f"{k}{v:g}" for k, v in point.items())


def run_point(args: argparse.Namespace, point: dict[str, Any]) -> dict[str, Any]:
    """The ladder's rows (base, SFT and the RL run) for one point of the grid."""
    name = point_name(point)
    changes = [f"stages.{args.stage}.overrides.max_steps={args.steps}",
               *(f"stages.{args.stage}.overrides.{k}={v}" for k, v in point.items())]
    # A point is judged on the held-out reward: the interactive score and the grounding on conv-26 (about 25 of
    # a point's 70 minutes on 2 cores) are left to the ladder the chosen values go into, unless --full_eval.
    evals = [] if args.full_eval else ["--interactive_eval", "false", "--grounding_sessions", "0"]
    # the ladder's own flags next, so a user's win over that choice and the sweep's (where each point writes,
    # what it runs) win over both
    rows = ladder.main(["--config", args.config, *evals, *args.ladder_args, "--sft_from", args.sft_from,
                        "--rl_stages", args.stage, "--seeds", str(args.seed), "--adapter_out", "null",
                        "--curve_every", "0", "--work_dir", str(Path(args.work_root) / name),
                        "--results_dir", str(Path(args.out) / name), "--set", *changes])
    return {"point": point, "name": name, "rows": rows}


def finished_point(args: argparse.Namespace, point: dict[str, Any]) -> dict[str, Any] | None:
    """A point's rows as its finished run wrote them, or None while its RL stage has no row."""
    name = point_name(point)
    path = Path(args.out) / name / "ladder.json"
    if not path.is_file():
        return None
    rows = json.loads(path.read_text())
    if not any(r.get("stage") == args.stage for r in rows):
        return None
    return {"point": point, "name": name, "rows": rows}


def summarise(runs: list[dict[str, Any]], stage: str) -> list[dict[str, Any]]:
    out = []
    for r in runs:
        by = {row["stage"]: row for row in r["rows"]}
        sft, rl = by["sft"], by[stage]
        changed = rl.get("held_out_actions_changed") or {}
        out.append({"name": r["name"], **r["point"], "reward": rl["reward_evidence"], "reward_ci": rl["reward_evidence_ci"],
                    "gain_over_noop": rl.get("gain_evidence"), "sft_reward": sft["reward_evidence"],
                    "vs_sft": paired_difference(sft["session_reward_evidence"], rl["session_reward_evidence"]),
                    "min_valid": min(rl["valid_rate"].values()),
                    "edit_share_changed": {a: (v.get("shares") or {}).get("edit") for a, v in changed.items()} or None,
                    "train_seconds": rl.get("train_seconds")})
    return out


def table(points: list[dict[str, Any]]) -> str:
    lines = ["| point | reward [95% CI] | minus SFT, paired [95% CI] | min valid |", "|---|---|---|---|"]
    for p in points:
        d = p["vs_sft"]
        diff = f"{d['mean']:+.3f} [{d['ci'][0]:.3f}, {d['ci'][1]:.3f}] ({against_zero(d['ci'])})" if d else "-"
        ci = p["reward_ci"]
        lines.append(f"| {p['name']} | {p['reward']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | {diff} | {p['min_valid']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/train/ladder_smollm2_cpu.yaml")
    p.add_argument("--sft_from", required=True, help="work folder of a ladder whose SFT stage has finished")
    p.add_argument("--stage", default="grpo", help="the RL stage each point runs")
    p.add_argument("--grid", nargs="+", default=["learning_rate=1e-4,3e-5", "beta=0,0.02"],
                   help="FIELD=V1,V2,... per axis, fields of the RL stage's config")
    p.add_argument("--steps", type=int, default=8, help="RL steps per point")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work_root", default="runs/sweep")
    p.add_argument("--out", default="results/sweep")
    p.add_argument("--full_eval", action="store_true",
                   help="also score each point in the interactive world and on conv-26, as a ladder stage is")
    p.add_argument("--report_only", action="store_true",
                   help="rewrite sweep.{json,md} from the points already finished; train nothing")
    p.add_argument("--ladder_args", nargs=argparse.REMAINDER, default=[],
                   help="further ladder flags for every point (the last option: all that follows it)")
    args = p.parse_args(argv)
    grid, runs, points = grid_points(args.grid), [], []
    if args.report_only:
        runs = [r for r in (finished_point(args, point) for point in grid) if r is not None]
        if not runs:
            raise SystemExit(f"--report_only: no point of {args.grid} has finished under {args.out}")
        points = summarise(runs, args.stage)
        write_results(args, points, len(grid))
        print(table(points))
        return points
    for point in grid:
        runs.append(run_point(args, point))
        # the table so far after every point: a sweep stopped part-way still says what its finished points showed
        points = summarise(runs, args.stage)
        write_results(args, points, len(grid))
    print(table(points))
    return points


def write_results(args: argparse.Namespace, points: list[dict[str, Any]], planned: int) -> None:
    out = Path(args.out)
    write_json(out / "sweep.json", {"stage": args.stage, "steps": args.steps, "seed": args.seed, "grid": args.grid,
                                    "points_done": len(points), "points_planned": planned, "points": points})
    done = "" if len(points) == planned else f" ({len(points)} of {planned} points so far)"
    atomic_write_text(out / "sweep.md", f"RL stage {args.stage}, {args.steps} steps, seed {args.seed}, from "
                                        f"the SFT stage of {args.sft_from}{done}\n\n{table(points)}\n")


if __name__ == "__main__":
    main()
