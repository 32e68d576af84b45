"""One way to load a causal LM from a checkpoint folder, checked to hold real weights.

Every place that loads a model by path (the chat backend, the trainer's policy, adapter merges)
goes through :func:`load_causal_lm`. transformers 5 builds the model on the meta device and then
fills it from the checkpoint; a checkpoint that ties its output layer to the embeddings (SmolLM2,
the tests' tiny Llama) stores the embeddings once and relies on the tie being made while loading.
Late in a long test process that tie has been seen to be skipped (the load report lists
``lm_head.weight`` as missing and the layer stays on the meta device), after which any ``.to()``
fails with "Cannot copy out of meta tensor". Re-tying from the config repairs it; anything still
on the meta device afterwards is an error that names the checkpoint and the parameters.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def meta_parameters(model: Any) -> list[str]:
    """Names of parameters and buffers that hold no data (left on the meta device)."""
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return [name for name, t in named if t.device.type == "meta"]


def ensure_loaded(model: Any, source: str) -> Any:
    """``model`` with every weight real: a skipped embedding tie is made again; other gaps raise."""
    missing = meta_parameters(model)
    if not missing:
        return model
    config = getattr(model, "config", None)
    ties = bool(getattr(config, "tie_word_embeddings", False)) if config is not None else False
    if ties:
        model.tie_weights()  # recomputes the tie mapping from the config
        still = meta_parameters(model)
        if not still:
            log.warning("%s: the tied output layer was left unloaded (%s); tied it to the embeddings again",
                        source, ", ".join(missing))
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
