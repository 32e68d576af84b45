"""Language models and embedders behind small protocols (``ChatModel``, ``Embedder``).

Importing this package is cheap: torch, transformers, httpx and vllm load only when a backend
is built. Start with ``load_chat_model(spec)`` and ``load_embedder(spec)``; the spec syntax is
documented in ``membuilder.llm.registry``.
"""

from __future__ import annotations

import importlib

from membuilder.llm.base import ChatModel, Completion, Sampling, Usage, UsageLedger, with_purpose

# Public name -> module that defines it; loaded on first access.
_LAZY = {
    "load_chat_model": "membuilder.llm.registry",
    "parse_spec": "membuilder.llm.registry",
    "ModelSpec": "membuilder.llm.registry",
    "load_embedder": "membuilder.llm.embedders",
    "Embedder": "membuilder.llm.embedders",
    "TransformersChatModel": "membuilder.llm.transformers_backend",
    "OpenAIChatModel": "membuilder.llm.openai_backend",
    "ModelCallError": "membuilder.llm.openai_backend",
    "VLLMChatModel": "membuilder.llm.vllm_backend",
    "ModelServer": "membuilder.llm.server",
}

__all__ = ["ChatModel", "Completion", "Sampling", "Usage", "UsageLedger", "with_purpose", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'membuilder.llm' has no attribute {name!r}")
