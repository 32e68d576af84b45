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
import json
from pathlib import Path

from membuilder.plumbing.json_files import atomic_dir, atomic_write_text


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
    out["merged"] = save_merged(model, tokenizer, folder)
    return out


def save_merged(model, tokenizer, folder: str | Path) -> str:
    """Write ``folder/merged``: ``model`` with its adapter (if any) merged in, and the tokenizer."""
    merged = copy.deepcopy(model).merge_and_unload() if is_peft(model) else model
    template = getattr(tokenizer, "chat_template", None)
    with atomic_dir(Path(folder) / "merged") as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if template and not (tmp / "chat_template.jinja").exists():
            (tmp / "chat_template.jinja").write_text(template, encoding="utf-8")
    return str(Path(folder) / "merged")


def set_adapter_base(adapter: str | Path, base: str) -> bool:
    """Make an adapter folder name its base model ``base`` (a short name such as ``smollm2-135m``) instead of the
    path PEFT recorded, which is the converted checkpoint on the machine that trained it and may not exist on the
    next one. Returns whether the config changed."""
    path = Path(adapter) / "adapter_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if config.get("base_model_name_or_path") == base:
        return False
    config["base_model_name_or_path"] = base
    atomic_write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return True
