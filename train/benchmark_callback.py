"""A ``transformers.TrainerCallback`` that scores the policy being trained on a benchmark subset.

Every ``every_n_steps`` optimizer steps it wraps the live model and tokenizer as a ``ChatModel``,
runs the evaluation runner on the configured subset (e.g. the first 20 LoCoMo questions) with
the policy in the roles named by ``policy_roles`` (by default the memory constructor, the
``model`` role of the membuilder system) and logs judge accuracy as
``eval/<benchmark>/<category>`` (plus the headline / overall numbers). Each evaluation writes
into ``<out>/step-<n>`` so memories built by different policy versions never mix.

A training config turns it on with ``benchmark_eval`` (see ``train.common.BenchmarkEvalArgs``).
Importing this module imports transformers; the entry points import it only when it is on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from membuilder.llm.transformers_backend import TransformersChatModel
from memgym_env.benchmarks.runner import EvalConfig, evaluate


def summary_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """Flatten a report summary into ``eval/<benchmark>/<category>`` -> judge accuracy."""
    bench = summary["benchmark"]
    out: dict[str, float] = {}
    for key, group in summary["categories"].items():
        label = f"{key}-{group['name']}" if "name" in group else key
        if group["accuracy"] is not None:
            out[f"eval/{bench}/{label}"] = group["accuracy"]
    for part in ("headline", "overall", "abstention"):
        group = summary.get(part)
        if group and group.get("accuracy") is not None:
            out[f"eval/{bench}/{part}"] = group["accuracy"]
            if "f1" in group:
                out[f"eval/{bench}/{part}_f1"] = group["f1"]
    if summary.get("task_averaged_accuracy") is not None:
        out[f"eval/{bench}/task_averaged"] = summary["task_averaged_accuracy"]
    return out


class BenchmarkEvalCallback(TrainerCallback):
    """Evaluate the current policy every ``every_n_steps`` steps (see the module docstring).

    ``models`` holds ready ``ChatModel``s / embedder for the roles the policy does not play
    (e.g. a fixed judge); roles missing from both are loaded from the config's specs once.
    Call ``attach(trainer)`` to have the metrics go through ``trainer.log`` (and so to every
    reporting integration); otherwise they are appended to ``state.log_history``.
    """

    def __init__(self, config: EvalConfig, every_n_steps: int = 100, policy_roles: tuple[str, ...] = ("model",),
                 models: dict[str, Any] | None = None):
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
        self.config, self.every, self.policy_roles = config, every_n_steps, tuple(policy_roles)
        self.models = dict(models or {})
        self.trainer = None
        self.history: list[dict[str, float]] = []

    def attach(self, trainer) -> BenchmarkEvalCallback:
        self.trainer = trainer
        return self

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step % self.every or model is None:
            return control
        was_training, side = model.training, getattr(processing_class, "padding_side", None)
        try:
            policy = TransformersChatModel(model=model, tokenizer=processing_class, name=f"policy@{state.global_step}")
            models = {**self.models, **{role: policy for role in self.policy_roles}}
            cfg = dataclasses.replace(self.config, out=str(Path(self.config.out) / f"step-{state.global_step}"))
            metrics = summary_metrics(evaluate(cfg, models, quiet=True))
            if "judge" not in self.policy_roles:  # a fixed judge was checked once (first step's run.json)
                self.config = dataclasses.replace(self.config, judge_check=False)
            for role, m in models.items():  # reuse loaded fixed models at the next evaluation
                if role not in self.policy_roles:
                    self.models[role] = m
        finally:
            model.train(was_training)  # the wrapper switched it to eval mode
            if side is not None:
                processing_class.padding_side = side
        self.history.append({"step": state.global_step, **metrics})
        if self.trainer is not None:
            self.trainer.log(metrics)
        else:
            state.log_history.append({**metrics, "step": state.global_step})
        return control
