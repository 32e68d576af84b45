"""The ladder's learning-curve callback: held-out reward every N RL steps."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import TrainerCallback

from membuilder.llm.vllm_backend import VLLMChatModel
from membuilder.plumbing.json_files import write_json


class CurveCallback(TrainerCallback):
    """Held-out evidence reward on the curve's held-out sessions (``Evaluator.curve_keys``) every ``every`` optimizer
    steps, greedy, from the trainer's vLLM engine where the ladder evaluates on vLLM and the trainer has
    one, else from the trainer's model; the final step is left to the stage's full evaluation. A fresh run also
    measures step 0, before its first update, to check it starts where SFT's own evaluation left it."""

    def __init__(self, evaluator, every: int, label: str, path: Path | None = None):
        self.evaluator, self.every, self.label, self.path = evaluator, every, label, path
        self.keys = evaluator.curve_keys()
        self.pick = evaluator.a.eval_session_pick
        # a resumed run keeps the points its earlier sittings measured on the same held-out sessions
        self.points: list[dict[str, float]] = same_pick(json.loads(path.read_text(encoding="utf-8"))
                                                        if path is not None and path.exists() else [], self.pick)
        self.trainer = None

    def attach(self, trainer) -> None:
        """The trainer whose colocated vLLM engine (if it has one) generates the curve points."""
        self.trainer = trainer

    def _engine_model(self):
        """The trainer's own vLLM engine as a ChatModel, its weights synced to this step's policy, when the
        ladder evaluates on vLLM: the curve's points then come from the engine its stage evaluations use."""
        generation = getattr(self.trainer, "vllm_generation", None)
        if self.evaluator.a.eval_engine != "vllm" or getattr(generation, "llm", None) is None:
            return None
        generation.sync_weights()
        return VLLMChatModel.from_engine(generation.llm)

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kw):
        # Before the first update the trainer's engine holds the SFT policy, so its point must match SFT's own
        # evaluation on these sessions: a gap means the RL stage does not start where SFT ended (weight sync,
        # dtype, prompt), and every later point carries that gap.
        if self.every and state.global_step == 0 and not any(p["step"] == 0 for p in self.points):
            self._measure(state, model, processing_class)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kw):
        if not self.every or state.global_step % self.every or state.global_step >= state.max_steps:
            return
        self._measure(state, model, processing_class)

    def _measure(self, state, model, processing_class) -> None:
        was_training = model.training
        scorers = {"evidence": self.evaluator.scorers["evidence"]}
        generator = self._engine_model() or model
        res = self.evaluator.generate(generator, processing_class, self.keys, f"{self.label} step {state.global_step}",
                                      scorers)
        if was_training:
            model.train()
        point = {"step": state.global_step, "held_out_reward": res["reward"]["evidence"],
                 "engine": "transformers" if generator is model else "vllm", "session_pick": self.pick}
        # a step redone after a resume replaces the point its first sitting measured
        self.points = [p for p in self.points if p["step"] != point["step"]] + [point]
        if self.path is not None:
            write_json(self.path, self.points)


def same_pick(points: list[dict], pick: str) -> list[dict]:
    """The curve points measured on held-out sessions picked by ``pick`` (a point without one took the first)."""
    return [p for p in points if p.get("session_pick", "first") == pick]
