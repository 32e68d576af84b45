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
import shutil
from pathlib import Path


def _atomic_save(target: Path, write) -> Path:
    tmp = target.with_name(target.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    write(tmp)
    old = target.with_name(target.name + ".old")
    if target.exists():
        if old.exists():
            shutil.rmtree(old)
        target.rename(old)
    tmp.rename(target)
    if old.exists():
        shutil.rmtree(old)
    return target


def is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")


def save_policy(model, tokenizer, folder: str | Path) -> dict[str, str]:
    """Save ``model`` (a PEFT model or a plain one) for inference; returns {kind: path}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    if is_peft(model):
        out["adapter"] = str(_atomic_save(folder / "adapter", lambda p: model.save_pretrained(p)))
        merged = copy.deepcopy(model).merge_and_unload()
    else:
        merged = model
    template = getattr(tokenizer, "chat_template", None)

    def write_merged(path: Path) -> None:
        merged.save_pretrained(path, safe_serialization=True)
        tokenizer.save_pretrained(path)
        if template and not (path / "chat_template.jinja").exists():
            (path / "chat_template.jinja").write_text(template, encoding="utf-8")

    out["merged"] = str(_atomic_save(folder / "merged", write_merged))
    return out
