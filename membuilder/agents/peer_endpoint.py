"""The OpenAI-compatible endpoint a peer's own client calls for its model.

A model already behind a server (an ``openai:...@url`` spec) is used where it is. A local model
(a short name or a checkpoint) is put behind ``memgym serve``'s server on loopback, in this
process, on a free port: the peer then talks HTTP to the very model object the run meters.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from membuilder.agents.mem0_store import Endpoint
from membuilder.llm.server import ModelServer, ServeLimits


class _Booked:
    """``model`` with every call the server makes booked under ``purpose`` in its usage ledger."""

    def __init__(self, model: Any, purpose: str):
        self._model, self._purpose = model, purpose
        accepts = inspect.signature(model.generate).parameters
        self._stoppable, self._sized = "should_stop" in accepts, "context_length" in accepts

    def generate(self, conversations, sampling=None, *, purpose=None, should_stop=None, context_length=None):
        kwargs = {"should_stop": should_stop} if should_stop is not None and self._stoppable else {}
        if context_length is not None and self._sized:  # the server's context, which it has checked
            kwargs["context_length"] = context_length
        return self._model.generate(conversations, sampling, purpose=self._purpose, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._model, name)


def model_endpoint(model: Any, max_tokens: int = 256, context_length: int | None = None, purpose: str = "write"):
    """``(Endpoint, server or None)`` for ``model``; stop the server with ``server.stop()``.

    ``context_length`` overrides the loopback server's prompt + completion limit (default: the
    model's own); a longer prompt is refused with HTTP 400, which a peer counts as a failed write.
    A local model's replies are capped at ``max_tokens`` by the server (A-Mem sends no limit of its
    own), and its calls are booked under ``purpose`` (a served one books nothing here: its
    tokens come from the responses' usage).
    """
    http = getattr(model, "http", None)
    if http is not None and getattr(model, "model", None):  # an OpenAIChatModel: its server already exists
        key = os.environ.get(http.api_key_env) if http.api_key_env else None
        return Endpoint(http.base_url, model.model, key or "unused", max_tokens), None
    if hasattr(model, "ledger"):
        model = _Booked(model, purpose)
    server = ModelServer(model, None, host="127.0.0.1", port=0, chat_name=getattr(model, "name", "local"),
                         unconstrained_json=True, limits=ServeLimits(context_length=context_length, max_tokens=max_tokens))
    server.start()
    return Endpoint(server.url, server.chat_name, "unused", max_tokens), server
