"""Which interpreter runs an engine in the engine benchmarks: vLLM lives in ``.venv-vllm``."""

from __future__ import annotations

import sys
from pathlib import Path

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"


def python_for(engine: str) -> str | None:
    """The interpreter for ``engine`` (``vllm*`` names need ``.venv-vllm``); None, with a note, if absent."""
    if not engine.startswith("vllm"):
        return sys.executable
    if VLLM_PYTHON.exists():
        return str(VLLM_PYTHON)
    print(f"skipping {engine}: no .venv-vllm (make setup-vllm)", file=sys.stderr)
    return None
