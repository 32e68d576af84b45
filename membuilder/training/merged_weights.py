"""The LoRA policy's merged weights for a vLLM engine, computed without touching the base weights.

TRL sends a PEFT policy to vLLM by merging the adapters into the base weights in place, reading
them, and unmerging. In bfloat16 each merge and unmerge rounds, so the frozen base drifts a little
with every sync, and a sync happens every optimizer step. On a tiny Llama with LoRA r=16 in
bfloat16, 111 merge/unmerge cycles changed 55% of the base weights, by up to 0.11 (the weights
are about 0.02 in size); in float32 the drift stays at rounding level. A 100-step ladder run would
train on a base that is no longer the model it started from, and the engine would sample from
it too.

Here each LoRA-wrapped weight is sent as ``W + delta`` computed in float32 and rounded once to the
weight's dtype, into a new tensor: the trainer's weights are never written. Sharded models
(FSDP, DeepSpeed ZeRO-3) keep TRL's own path, which gathers the parameters first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def merged_named_params(model) -> Iterator[tuple[str, Any]]:
    """(name, tensor) of a PEFT LoRA model as the plain model would name them, adapters merged in.

    Adapter weights are left out, ``modules_to_save`` copies replace their originals, and nothing
    of ``model`` changes."""
    import torch
    from peft.tuners.lora import LoraLayer

    merged: dict[str, torch.Tensor] = {}
    for module_name, module in model.named_modules():
        if not isinstance(module, LoraLayer) or module.merged:
            continue
        adapters = [a for a in module.active_adapters if a in module.lora_A]
        if not adapters:
            continue
        weight = module.get_base_layer().weight
        with torch.no_grad():
            total = weight.detach().float()
            for adapter in adapters:
                total = total + module.get_delta_weight(adapter).float()
        merged[f"{module_name}.base_layer.weight"] = total.to(weight.dtype)
    prefix = getattr(model, "prefix", "lora_")
    for name, param in model.named_parameters():
        if prefix in name or "original_module" in name:
            continue
        tensor = merged.get(name, param.detach())
        yield name.removeprefix("base_model.model.").replace(".base_layer", ""), tensor


def install_exact_lora_sync(generation: Any) -> bool:
    """Make TRL's ``VLLMGeneration`` read a PEFT policy through ``merged_named_params``; True if installed.

    Names get TRL's own vLLM fix-ups, so the engine sees what TRL would send, minus the drift."""
    from peft import PeftModel

    model = getattr(generation, "model", None)
    dist = getattr(generation, "_dist", None)
    if not isinstance(model, PeftModel) or dist is None or dist.is_fsdp or dist.is_zero3:
        return False

    def exact() -> Iterator[tuple[str, Any]]:
        for name, tensor in merged_named_params(model):
            yield generation._fix_param_name_to_vllm(name, extra_prefixes=["modules_to_save.default."]), tensor

    generation._iter_named_params = exact
    return True
