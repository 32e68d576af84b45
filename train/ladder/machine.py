"""The machine each sitting of a ladder stage trained on, and the machine each of its evaluations ran on.

A work folder outlives the machine: SFT on one CPU, an RL seed on another. CPUs differ in more than
speed: with AMX the policy's base weights are bfloat16 under LoRA (``dtype: auto``), float32 elsewhere,
so two seeds trained on different CPUs differ in their numerics as well as in their seed. Each stage
folder keeps ``machine.json``, one entry per sitting, and the report names them beside the time.

Evaluations move with the machine too, some far more than the training: the told world's SFT trained and
evaluated again on an AMD EPYC matched an AMX Xeon's held-out reward (paired -0.002 [-0.013, 0.008]) but
answered +0.183 [0.067, 0.300] more interactive questions (results/ladder-told-amd/README.md). Each cached
evaluation keeps ``evaluated_on`` (``evaluating``), and the report marks comparisons made across machines."""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path
from typing import Any

from membuilder.llm.cpu_flags import cpu_flags
from membuilder.plumbing.json_files import write_json

MACHINE = "machine.json"


def cpu_name() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (the platform's processor string elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def evaluating() -> dict[str, Any]:
    """This machine as an evaluation's greedy outputs depend on it: the CPU and its bf16 units (the engine's
    dtype is kept beside it in each cache)."""
    flags = cpu_flags()
    return {"cpu": cpu_name(), "amx": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags,
            "cores": os.cpu_count()}


def describe(base_dtype: str | None = None) -> dict[str, Any]:
    """This machine as a stage's result depends on it: CPU, the bf16 instructions it has, its cores, torch,
    and the dtype the policy's frozen base weights trained in."""
    import torch

    return {**evaluating(), "torch": torch.__version__, "base_dtype": base_dtype}


def same_machine(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool | None:
    """Whether two evaluations ran on one kind of machine (CPU model and its bf16 units); None where either
    was made before evaluations recorded it."""
    if not a or not b:
        return None
    return all(a.get(k) == b.get(k) for k in ("cpu", "amx", "avx512_bf16"))


def across(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    """The note a comparison of two evaluations carries when they ran on different machines ("" otherwise, or
    where either is not recorded)."""
    if same_machine(a, b) is not False:
        return ""
    return f"; evaluated on different machines ({label(a)}, {label(b)}), which alone can move this figure"


def base_dtype(model) -> str | None:
    """The dtype of the weights a LoRA run leaves frozen (all weights' dtype for a full fine-tune)."""
    frozen = [p.dtype for p in model.parameters() if not p.requires_grad] or [p.dtype for p in model.parameters()]
    return str(frozen[0]).removeprefix("torch.") if frozen else None


def record(folder: Path, sitting: dict[str, Any]) -> None:
    """Add this sitting's machine to ``folder/machine.json`` unless the last sitting ran on the same one."""
    path = folder / MACHINE
    sittings = read(folder)
    if not sittings or sittings[-1] != sitting:
        folder.mkdir(parents=True, exist_ok=True)
        write_json(path, [*sittings, sitting])


def read(folder: Path) -> list[dict[str, Any]]:
    """The machines a stage trained on, in order (none where it was trained before they were recorded)."""
    path = folder / MACHINE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else []


def label(m: dict[str, Any] | None) -> str:
    """A machine in a few words for a report line: ``Intel Xeon (AMX)``, ``not recorded`` where unknown."""
    if not m:
        return "not recorded"
    return short_cpu(m.get("cpu", "?")) + (" (AMX)" if m.get("amx") else " (no AMX)")


def short_cpu(name: str) -> str:
    """A CPU's model name without trademarks and filler (``Intel(R) Xeon(R) Processor`` -> ``Intel Xeon``), so
    a report's table fits 80 columns."""
    name = re.sub(r"\((R|TM)\)|\bProcessor\b|\bCPU\b|@\s*[\d.]+\s*GHz", " ", name, flags=re.IGNORECASE)
    return " ".join(name.split())
