"""The real SmolLM2 chat model, loaded once per test process and shared by the llm test modules
(a plain cache rather than a fixture, so two modules get the same object)."""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=2)
def smollm2(dtype: str | None = None):
    """The model in the dtype this machine picks (bfloat16 with AMX, else float32), or ``dtype``.

    Tests that compare greedy text across batch shapes ask for float32: in bfloat16 the padding
    of a batch changes rounding, and a near tie can then pick another token.
    """
    from membuilder.llm import load_chat_model

    # On a 2-core machine shared with other jobs one torch thread is several times faster than two.
    threads = 1 if (os.cpu_count() or 1) <= 2 else None
    return load_chat_model("smollm2-135m", threads=threads, **({"dtype": dtype} if dtype else {}))
