"""One way to load a causal LM from a checkpoint folder, checked to hold real weights.

Every place that loads a model by path (the chat backend, the trainer's policy, adapter merges)
goes through :func:`load_causal_lm`. transformers 5 builds the model on the meta device and then
fills it from the checkpoint; a checkpoint that ties its output layer to the embeddings (SmolLM2,
the tests' tiny Llama) stores the embeddings once and relies on the tie being made while loading.
Late in a long test process that tie has been seen to be skipped (the load report lists
``lm_head.weight`` as missing and the layer stays on the meta device), after which any ``.to()``
fails with "Cannot copy out of meta tensor"; re-running transformers' own ``tie_weights()`` then
ties nothing either. Tying the output layer to the embeddings directly, as the checkpoint's
config.json asks, repairs it (the warning records what the loaded model said about tying); anything still
on the meta device afterwards is an error that names the checkpoint and the parameters.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def meta_parameters(model: Any) -> list[str]:
    """Names of parameters and buffers that hold no data (left on the meta device)."""
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return [name for name, t in named if t.device.type == "meta"]


def _checkpoint_ties(source: str) -> bool:
    """Whether the checkpoint folder's own ``config.json`` asks for tied embeddings."""
    path = Path(source) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    return bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


def ensure_loaded(model: Any, source: str) -> Any:
    """``model`` with every weight real: a skipped embedding tie is made again; other gaps raise."""
    missing = meta_parameters(model)
    if not missing:
        return model
    config = getattr(model, "config", None)
    said = getattr(config, "tie_word_embeddings", None)
    if said or _checkpoint_ties(source):
        out, inp = model.get_output_embeddings(), model.get_input_embeddings()
        if out is not None and inp is not None and out.weight.shape == inp.weight.shape \
                and out.weight.device.type == "meta" and inp.weight.device.type != "meta":
            out.weight = inp.weight
            if config is not None:
                config.tie_word_embeddings = True
        still = meta_parameters(model)
        if not still:
            # what the loaded model said about tying, so a recurrence can be traced to its cause
            log.warning("%s: the tied output layer was left unloaded (%s; loaded config tie_word_embeddings=%r, "
                        "tie mapping %r); tied it to the embeddings again", source, ", ".join(missing), said,
                        getattr(model, "all_tied_weights_keys", None))
            return model
        missing = still
    raise RuntimeError(
        f"checkpoint {source}: {len(missing)} weight(s) were not loaded and hold no data "
        f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); the checkpoint is incomplete "
        f"or was written for another architecture")


def load_causal_lm(path: str, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained(path, **kwargs)`` with every weight checked to be loaded."""
    from transformers import AutoModelForCausalLM

    return ensure_loaded(AutoModelForCausalLM.from_pretrained(str(path), **kwargs), str(path))
