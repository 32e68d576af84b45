"""One way to load a model from a checkpoint folder, checked to hold real weights.

Every place that loads a model by path (the chat backend, the trainer's policy, adapter merges,
the embedder) goes through this module. transformers 5 builds a model with weight tying switched
off by replacing ``PreTrainedModel.tie_weights`` *on the class* for the length of the build
(``transformers.initialization.no_tie_weights``) and putting the saved function back afterwards.
Two builds in two threads at once can interleave so that the second one saves the stand-in and
puts it back last: from then on no model in the process ties anything. A checkpoint that stores
its embeddings once and ties the output layer to them (SmolLM2, the tests' tiny Llama) then
loads with ``lm_head.weight`` "missing" and left on the meta device, and the first ``.to()``
fails with "Cannot copy out of meta tensor" - in our code and in TRL's reference-model load alike.

So loads here hold one lock, the genuine ``tie_weights`` is put back if a racing load elsewhere
left the stand-in in place, and a loaded model is checked: an output layer still without data is
tied again; any other gap is an error naming the checkpoint and the weights. The genuine
``tie_weights`` is remembered by the first load through this module, before it builds; importing the
module imports nothing heavy, so the modules that load models can import it at their top.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

_LOAD_LOCK = threading.RLock()
_GENUINE: dict[str, Any] = {}


def _genuine_tie_weights() -> Any:
    """transformers' own ``PreTrainedModel.tie_weights``, remembered the first time it is seen."""
    from transformers import PreTrainedModel

    current = PreTrainedModel.__dict__.get("tie_weights")
    if "tie" not in _GENUINE and getattr(current, "__qualname__", "") == "PreTrainedModel.tie_weights":
        _GENUINE["tie"] = current
    return _GENUINE.get("tie")


def heal_tie_weights() -> bool:
    """Put transformers' ``tie_weights`` back if a racing load left its build-time stand-in on the
    class (call with the load lock held, so none of our own builds is using the stand-in)."""
    from transformers import PreTrainedModel

    genuine = _genuine_tie_weights()
    current = PreTrainedModel.__dict__.get("tie_weights")
    if genuine is None or current is genuine:
        return False
    PreTrainedModel.tie_weights = genuine
    log.warning("PreTrainedModel.tie_weights had been left replaced by %s (two model loads raced in two "
                "threads); transformers' own tie_weights is back", getattr(current, "__qualname__", current))
    return True


@contextmanager
def loading_guard():
    """One model build at a time in this process, starting from transformers' own ``tie_weights``."""
    with _LOAD_LOCK:
        heal_tie_weights()
        yield


def meta_parameters(model: Any) -> list[str]:
    """Names of parameters and buffers that hold no data (left on the meta device)."""
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return [name for name, t in named if t.device.type == "meta"]


def ensure_loaded(model: Any, source: str) -> Any:
    """``model`` with every weight real: an output layer whose tie was skipped (a stand-in
    ``tie_weights`` during its build) is tied again by transformers' own ``tie_weights``; other gaps raise."""
    missing = meta_parameters(model)
    if not missing:
        return model
    heal_tie_weights()
    model.tie_weights()  # recomputes the tie mapping from the model's config
    still = meta_parameters(model)
    if not still:
        log.warning("%s: the tied output layer was left unloaded (%s); tied it to the embeddings again",
                    source, ", ".join(missing))
        return model
    raise RuntimeError(
        f"checkpoint {source}: {len(still)} weight(s) were not loaded and hold no data "
        f"({', '.join(still[:5])}{', ...' if len(still) > 5 else ''}); the checkpoint is incomplete "
        f"or was written for another architecture")


def load_causal_lm(path: str, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained(path, **kwargs)`` with every weight checked to be loaded."""
    from transformers import AutoModelForCausalLM

    with loading_guard():
        return ensure_loaded(AutoModelForCausalLM.from_pretrained(str(path), **kwargs), str(path))
