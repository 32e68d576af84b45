"""Build an assistant by name: ``make_assistant("awe", model, embedder, top_k=10)``."""

from __future__ import annotations

import inspect
from typing import Any

ASSISTANTS = ("native", "rag", "awe", "awi", "membuilder", "oracle")
NEEDS_EMBEDDER = ("rag", "awe", "membuilder")


def assistant_class(name: str):
    if name == "native":
        from membuilder.agents.native import NativeAssistant as cls
    elif name == "rag":
        from membuilder.agents.rag import RAGAssistant as cls
    elif name == "awe":
        from membuilder.agents.awe import AWEAssistant as cls
    elif name == "awi":
        from membuilder.agents.awi import AWIAssistant as cls
    elif name == "membuilder":
        from membuilder.agents.membuilder_assistant import MemBuilderAssistant as cls
    elif name == "oracle":
        from membuilder.agents.oracle import OracleAssistant as cls
    else:
        raise ValueError(f"unknown assistant {name!r}; expected one of {', '.join(ASSISTANTS)}")
    return cls


def accepted_options(name: str) -> set[str]:
    """Keyword options the assistant takes (its own and ``ChatAssistant``'s)."""
    from membuilder.agents.assistant import ChatAssistant

    names = set()
    for cls in (assistant_class(name), ChatAssistant):
        names |= {p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "model", "embedder", "kwargs")}
    return names


def make_assistant(name: str, model, embedder=None, **options: Any):
    """An assistant over ``model``; options it does not take are an error naming them."""
    cls = assistant_class(name)
    unknown = set(options) - accepted_options(name)
    if unknown:
        raise ValueError(f"assistant {name!r} has no option(s) {sorted(unknown)}; it takes {sorted(accepted_options(name))}")
    if name in NEEDS_EMBEDDER:
        if embedder is None:
            raise ValueError(f"assistant {name!r} needs an embedder (load_embedder('minilm'))")
        return cls(model, embedder, **options)
    return cls(model, **options)
