"""The ladder's learning-curve callback: held-out reward every N RL steps (imported only when used)."""

from __future__ import annotations

from transformers import TrainerCallback


class CurveCallback(TrainerCallback):
    """Held-out evidence reward on the first ``sessions`` held-out sessions every ``every`` optimizer
    steps, greedy; the final step is left to the stage's full evaluation."""

    def __init__(self, evaluator, every: int, sessions: int, label: str):
        self.evaluator, self.every, self.label = evaluator, every, label
        self.keys = evaluator.keys[:sessions]
        self.points: list[dict[str, float]] = []

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kw):
        if not self.every or state.global_step % self.every or state.global_step >= state.max_steps:
            return
        was_training = model.training
        scorers = {"evidence": self.evaluator.scorers["evidence"]}
        res = self.evaluator.generate(model, processing_class, self.keys, f"{self.label} step {state.global_step}",
                                      scorers)
        if was_training:
            model.train()
        self.points.append({"step": state.global_step, "held_out_reward": res["reward"]["evidence"]})
