"""Weight sync from the policy being trained into a colocated vLLM engine on a CPU.

TRL's colocate mode pushes each parameter into the engine with the model's ``load_weights``.
vLLM's CPU linear layers repack their weights for oneDNN when the engine starts and leave an
empty parameter behind, so that per-tensor push fails there ("'Parameter' object has no
attribute 'weight_loader'"). vLLM's ``reload_weights`` instead runs the whole checkpoint-format
load again, repacking included, from an iterator of (name, tensor) pairs: the generation's
own iterator, which yields the policy's weights under vLLM's names with LoRA adapters merged in
(``merged_weights``, installed by the ADRPO trainer, for a PEFT policy).

Only the CPU path is changed: on CUDA, TRL's sync is left exactly as it is.

TRL also builds the colocated engine with the checkpoint's dtype (bfloat16 for SmolLM2 and Qwen3),
which vLLM keeps on any x86 CPU; ``engine_dtype_for_cpu`` makes that engine run in the dtype the CPU
computes natively (``membuilder.llm.vllm_backend.cpu_engine_dtype``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from membuilder.llm.vllm_backend import cpu_engine_dtype


@contextmanager
def engine_dtype_for_cpu(use_vllm: bool) -> Iterator[None]:
    """While TRL's trainer is built, its colocated vLLM engine on a CPU is made in ``cpu_engine_dtype()``:
    float32 on a CPU without native bfloat16, where vLLM's bfloat16 ran 4-5x slower. Elsewhere (no vLLM,
    a GPU, a TRL that builds its engine otherwise) nothing changes."""
    generation = None
    if use_vllm:
        try:
            import trl.generation.vllm_generation as generation

            on_cpu = engine_on_cpu()
        except ImportError:
            on_cpu = False
        if not on_cpu or not hasattr(generation, "LLM"):
            generation = None
    if generation is None:
        yield
        return
    build = generation.LLM
    generation.LLM = functools.partial(build, dtype=cpu_engine_dtype())
    try:
        yield
    finally:
        generation.LLM = build


def engine_on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def sync_through_reload(generation: Any) -> None:
    """Push the trainer's current weights into ``generation.llm`` (TRL's ``VLLMGeneration``)."""
    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=generation._iter_named_params(), is_checkpoint_format=True)
    generation.llm.reset_prefix_cache()  # cached prefixes hold keys and values of the old weights


def install_cpu_weight_sync(trainer: Any) -> bool:
    """Route a colocated CPU engine's weight sync through ``reload_weights``; True if installed."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or getattr(generation, "mode", None) != "colocate" or not engine_on_cpu():
        return False
    generation.sync_weights = lambda: sync_through_reload(generation)
    return True
