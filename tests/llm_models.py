"""The real SmolLM2 chat model, loaded once per test process and shared by the llm test modules
(a plain cache rather than a fixture, so two modules get the same object)."""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=1)
def smollm2():
    from membuilder.llm import load_chat_model

    # On a 2-core machine shared with other jobs one torch thread is several times faster than two.
    threads = 1 if (os.cpu_count() or 1) <= 2 else None
    return load_chat_model("smollm2-135m", threads=threads)
