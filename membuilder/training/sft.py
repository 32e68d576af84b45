"""SFT on expert trajectories with TRL's ``SFTTrainer``: full fine-tuning or LoRA.

The dataset is ``trajectories.to_dataset(...)``: a ``messages`` column whose last turn is the
expert's output. With ``assistant_only_loss`` only that turn (and its end-of-turn token) is
trained; ``chat_templates.ensure_generation_markers`` supplies a template with generation
markers when the model's own lacks them (SmolLM2).
"""

from __future__ import annotations

from typing import Any

from membuilder.training.chat_templates import ensure_generation_markers


def lora_config(r: int = 16, alpha: int = 32, dropout: float = 0.05, target_modules: Any = "all-linear"):
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, task_type="CAUSAL_LM")


def build_sft_trainer(model, tokenizer, train_dataset, args, peft_config=None, eval_dataset=None, callbacks=None):
    """An ``SFTTrainer`` over a ``messages`` dataset; only the columns TRL reads are kept."""
    from trl import SFTTrainer

    if args.assistant_only_loss:
        ensure_generation_markers(tokenizer)
    keep = ["messages"]
    train_dataset = train_dataset.select_columns(keep)
    if eval_dataset is not None:
        eval_dataset = eval_dataset.select_columns(keep)
    return SFTTrainer(model=model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                      processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks)
