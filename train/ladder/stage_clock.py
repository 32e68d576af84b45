"""Training time of a ladder stage summed over the sittings it took (a run resumed from a checkpoint)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from transformers import TrainerCallback

from membuilder.plumbing.json_files import write_json
from train.ladder import machine

CLOCK = "clock.json"


def clock_seconds(folder: Path) -> float | None:
    path = folder / CLOCK
    return float(json.loads(path.read_text(encoding="utf-8"))["seconds"]) if path.exists() else None


class StageClock(TrainerCallback):
    """Writes ``{step, seconds}`` to ``folder/clock.json`` at every checkpoint and at the end, and each
    sitting's machine to ``folder/machine.json``.

    A resumed run starts from the seconds recorded with the checkpoint it resumes from; time spent
    after that checkpoint by a sitting that was stopped is not counted, since those steps are redone.
    """

    def __init__(self, folder: Path, resumed_from: str | None):
        self.folder = folder
        self.prior = 0.0
        self.at_checkpoint: dict[str, float] = {}
        path = folder / CLOCK
        if resumed_from and path.exists():
            self.at_checkpoint = json.loads(path.read_text(encoding="utf-8")).get("at_checkpoint", {})
            self.prior = float(self.at_checkpoint.get(Path(resumed_from).name, 0.0))
        self.started = time.perf_counter()

    def _write(self, step: int, checkpoint: str | None = None) -> None:
        seconds = self.prior + time.perf_counter() - self.started
        if checkpoint:
            self.at_checkpoint[checkpoint] = round(seconds, 1)
        write_json(self.folder / CLOCK, {"step": step, "seconds": round(seconds, 1), "at_checkpoint": self.at_checkpoint})

    def on_train_begin(self, args, state, control, model=None, **kw):
        # the seconds summed here may come from several machines: say which (train.ladder.machine)
        machine.record(self.folder, machine.describe(machine.base_dtype(model) if model is not None else None))

    def on_save(self, args, state, control, **kw):
        self._write(state.global_step, f"checkpoint-{state.global_step}")

    def on_train_end(self, args, state, control, **kw):
        self._write(state.global_step)
