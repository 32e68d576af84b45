"""The vLLM suite (`make test-vllm`): runs in .venv-vllm, where vLLM's CPU engine is installed.

Without vLLM (the default .venv) nothing here is collected, so `make test` stays free of it.
"""

from __future__ import annotations

import importlib.util
import os

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

collect_ignore_glob = [] if importlib.util.find_spec("vllm") is not None else ["test_*.py"]
