"""Build an assistant by name: ``make_assistant("awe", model, embedder, top_k=10)``."""

from __future__ import annotations

import inspect
from typing import Any

from membuilder.agents.a_mem_assistant import AMemAssistant
from membuilder.agents.assistant import ChatAssistant
from membuilder.agents.awe import AWEAssistant
from membuilder.agents.awi import AWIAssistant
from membuilder.agents.mem0_assistant import Mem0Assistant, Mem0InferAssistant
from membuilder.agents.membuilder_assistant import MemBuilderAssistant
from membuilder.agents.native import NativeAssistant
from membuilder.agents.oracle import OracleAssistant
from membuilder.agents.rag import RAGAssistant

ASSISTANTS = ("native", "rag", "awe", "awi", "membuilder", "oracle", "mem0", "mem0-infer", "a-mem")
NEEDS_EMBEDDER = ("rag", "awe", "membuilder", "mem0", "mem0-infer", "a-mem")


CLASSES = {"native": NativeAssistant, "rag": RAGAssistant, "awe": AWEAssistant, "awi": AWIAssistant,
           "membuilder": MemBuilderAssistant, "oracle": OracleAssistant,
           "mem0": Mem0Assistant, "mem0-infer": Mem0InferAssistant,  # the mem0ai package: extra memgym[peers]
           "a-mem": AMemAssistant}  # the a-mem package: extra memgym[peers]


def assistant_class(name: str):
    if name not in CLASSES:
        raise ValueError(f"unknown assistant {name!r}; expected one of {', '.join(ASSISTANTS)}")
    return CLASSES[name]


def accepted_options(name: str) -> set[str]:
    """Keyword options the assistant takes (its own and ``ChatAssistant``'s)."""
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
