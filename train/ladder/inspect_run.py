"""Read an RL run's rollout log: its learning signal and what its policy writes, finished or stopped part-way.

    python train/adrpo.py --config configs/train/adrpo_smollm2_cpu.yaml --output_dir runs/adrpo \\
        --rollout_log runs/adrpo/rollouts
    python -m train.ladder.inspect_run runs/adrpo          # or a ladder run: runs/ladder/seed0/adrpo

Prints the two summaries the ladder's report gives each RL run (``train.ladder.rl_signal``, ``train.ladder.policy_actions``)
and writes them to ``<run>/inspect.json`` with the edit-share plot ``<run>/actions.png``. The run folder holds
the ``rollouts.<process>.jsonl`` files (``--rollout_log <run>/rollouts``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from membuilder.plumbing.json_files import write_json
from train.ladder.policy_actions import gap_line, plot_actions, push_line, rollout_actions, rollout_line
from train.ladder.rl_signal import ROLLOUT_GLOB, rl_signal, rollout_logs, signal_line


def inspect(folder: Path, name: str = "run", window: int | None = None, bucket: int = 5) -> dict:
    if not rollout_logs(folder):
        raise SystemExit(f"{folder}: no rollout log ({ROLLOUT_GLOB}); train with --rollout_log {folder}/rollouts")
    out = {"run": str(folder), "train_signal": rl_signal(folder, window=window),
           "train_actions": rollout_actions(folder, bucket=bucket, window=window)}
    print(signal_line(name, None, out["train_signal"]))
    print(rollout_line(name, None, out["train_actions"]))
    if gap := gap_line(name, None, out["train_actions"]):
        print(gap)
    if push := push_line(name, None, out["train_actions"]):
        print(push)
    write_json(folder / "inspect.json", out)
    plot_actions([{"stage": name, "label": name, "seed": None, "train_actions": out["train_actions"]}],
                 folder / "actions.png")
    print(f"written: {folder / 'inspect.json'}, {folder / 'actions.png'}")
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="the run's folder, holding rollouts.<process>.jsonl")
    p.add_argument("--name", default="run", help="what the printed lines call the run")
    p.add_argument("--window", type=int, default=None, help="steps compared at each end (default: a quarter)")
    p.add_argument("--bucket", type=int, default=5, help="steps per point of the edit-share plot")
    a = p.parse_args(argv)
    return inspect(a.run, a.name, a.window, a.bucket)


if __name__ == "__main__":
    main()
