"""Saving trained policies so the transformers backend and ``memgym serve`` load them by path.

``save_policy(model, tokenizer, folder)`` writes, each atomically (into a temporary sibling,
renamed into place once complete):

* ``folder/adapter``: the LoRA adapter alone (small; ``PeftModel.from_pretrained``), when the
  model carries one;
* ``folder/merged``: a plain transformers checkpoint with the adapter merged in, plus the
  tokenizer, loadable with ``load_chat_model({"model": "<folder>/merged"})``.
"""

from __future__ import annotations

import copy
from pathlib import Path

from membuilder.plumbing.json_files import atomic_dir


def is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")


def save_policy(model, tokenizer, folder: str | Path) -> dict[str, str]:
    """Save ``model`` (a PEFT model or a plain one) for inference; returns {kind: path}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    if is_peft(model):
        with atomic_dir(folder / "adapter") as tmp:
            model.save_pretrained(tmp)
        out["adapter"] = str(folder / "adapter")
        merged = copy.deepcopy(model).merge_and_unload()
    else:
        merged = model
    template = getattr(tokenizer, "chat_template", None)
    with atomic_dir(folder / "merged") as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if template and not (tmp / "chat_template.jinja").exists():
            (tmp / "chat_template.jinja").write_text(template, encoding="utf-8")
    out["merged"] = str(folder / "merged")
    return out
