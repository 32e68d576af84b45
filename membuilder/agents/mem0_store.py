"""One Mem0 ``Memory`` (PyPI ``mem0ai``, OSS 2.x) set up to run offline and be measured.

Mem0 runs as published: its own embedder wrapper (``huggingface``) over the local MiniLM
folder, its own FAISS store (cosine) and SQLite history in a folder we choose, and, for
inferred writes, its own extraction prompt sent by its ``openai`` client to an
OpenAI-compatible endpoint. We never touch its prompts or parsing; we only count:

* model calls and tokens, from the usage of each response (Mem0's ``response_callback``);
* embedding calls and texts, through a counting wrapper around its embedder object;
* failed inferred writes: a reply Mem0 could not parse (its own "Error parsing extraction
  response" log record: it then stores nothing) and a request the endpoint refused (HTTP 4xx,
  e.g. a prompt longer than the model's context). A server that cannot be reached, or answers
  5xx, is not a failed write but an error: it stops the run, which resumes later.

Mem0's anonymous telemetry is switched off before it is imported (``MEM0_TELEMETRY=False``);
``MEM0_DIR`` (where it keeps a config file) defaults to a temporary folder, not ``~/.mem0``.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

COLLECTION = "memgym"
PARSE_FAILURE = "Error parsing extraction response"  # the start of Mem0's log record for a non-JSON reply
INSTALL_HINT = "Mem0 is an optional peer: pip install 'memgym[peers]' (or: pip install mem0ai)"
# Raw mode never calls a model, but Mem0 builds its client anyway: point it at a closed local port.
UNUSED_BASE_URL = "http://127.0.0.1:9/v1"


def import_mem0():
    """The ``mem0`` module, imported with telemetry off; a clear error when it is missing."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", str(Path(tempfile.gettempdir()) / "memgym-mem0"))
    try:
        import mem0
        from mem0.memory import main, telemetry
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    # Imported earlier in this process with the variable unset, the flag is on: Mem0 reads it
    # from these two module globals at each call, so turning them off stops every event.
    telemetry.MEM0_TELEMETRY = main.MEM0_TELEMETRY = False
    # Its warnings about optional parts it runs without (spaCy, keyword search) would repeat per store.
    logging.getLogger("mem0").setLevel(logging.ERROR)
    return mem0


@dataclass
class Mem0Costs:
    """What a store spent, summed over its life (``wall_s`` is time inside Mem0 calls)."""

    adds: int = 0
    searches: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embed_calls: int = 0
    embedded_texts: int = 0
    memories_written: int = 0
    writes_unparsed: int = 0  # Mem0 could not parse the model's reply and stored nothing
    writes_refused: int = 0  # the endpoint refused the request (4xx), nothing stored
    add_wall_s: float = 0.0
    search_wall_s: float = 0.0
    first_refusal: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["add_wall_s"], d["search_wall_s"] = round(self.add_wall_s, 3), round(self.search_wall_s, 3)
        return d


class _CountingEmbedder:
    """Mem0's embedder, with each call and text counted into ``costs``."""

    def __init__(self, inner, costs: Mem0Costs):
        self._inner, self._costs = inner, costs

    def embed(self, text, memory_action=None):
        self._costs.embed_calls += 1
        self._costs.embedded_texts += 1
        return self._inner.embed(text, memory_action)

    def embed_batch(self, texts, memory_action="add"):
        self._costs.embed_calls += 1
        self._costs.embedded_texts += len(texts)
        return self._inner.embed_batch(texts, memory_action)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class LoggedFailures(logging.Handler):
    """Counts a peer library's own error records that start with ``prefixes`` (its verdict that a
    model reply was unusable), so failed writes are counted by the peer's rules, not ours."""

    def __init__(self, prefixes: str | tuple[str, ...]):
        super().__init__(logging.ERROR)
        self.prefixes, self.count = prefixes, 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.getMessage()).startswith(self.prefixes):
            self.count += 1


@dataclass
class Endpoint:
    """Where Mem0's ``openai`` client sends inferred writes."""

    base_url: str
    model: str
    api_key: str = "unused"
    max_tokens: int = 256


class Mem0Store:
    """Mem0 over MiniLM (``embedder_path``) and a FAISS index under ``folder``. Memories are
    kept per ``user_id``: one user per conversation, so one never retrieves another's."""

    def __init__(self, folder: str | Path, embedder_path: str, dim: int = 384, endpoint: Endpoint | None = None):
        import_mem0()
        from mem0 import Memory

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.endpoint = endpoint
        self.costs = Mem0Costs()
        llm = endpoint or Endpoint(UNUSED_BASE_URL, "none")
        config = {
            "embedder": {"provider": "huggingface",
                         "config": {"model": embedder_path, "embedding_dims": dim, "model_kwargs": {"device": "cpu"}}},
            "vector_store": {"provider": "faiss",
                             "config": {"collection_name": COLLECTION, "path": str(self.folder / "faiss"),
                                        "distance_strategy": "cosine", "embedding_model_dims": dim}},
            "llm": {"provider": "openai",
                    "config": {"model": llm.model, "openai_base_url": llm.base_url, "api_key": llm.api_key,
                               "temperature": 0.0, "max_tokens": llm.max_tokens,
                               "response_callback": self._on_response}},
            "history_db_path": str(self.folder / "history.db"),
        }
        self.memory = Memory.from_config(config)
        self.memory.embedding_model = _CountingEmbedder(self.memory.embedding_model, self.costs)
        self._parse_failures = LoggedFailures(PARSE_FAILURE)

    def _on_response(self, llm, response, params) -> None:
        usage = getattr(response, "usage", None)
        self.costs.llm_calls += 1
        if usage is not None:
            self.costs.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
            self.costs.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)

    def add(self, messages: list[dict[str, str]], user_id: str, *, infer: bool,
            metadata: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Mem0's ``add``; returns its events (``[]`` for a failed inferred write, counted)."""
        if infer and self.endpoint is None:
            raise ValueError("an inferred Mem0 write needs an endpoint (a model to extract facts)")
        mem0 = import_mem0()
        log = logging.getLogger("mem0.memory.main")
        log.addHandler(self._parse_failures)
        before = self._parse_failures.count
        started = time.perf_counter()
        try:
            out = self.memory.add(messages, user_id=user_id, infer=infer, metadata=metadata)
        except mem0.exceptions.LLMError as exc:
            if not _refused(exc):
                raise
            self.costs.writes_refused += 1
            self.costs.first_refusal = self.costs.first_refusal or str(exc.__cause__ or exc)[:300]
            return []
        finally:
            log.removeHandler(self._parse_failures)
            self.costs.adds += 1
            self.costs.add_wall_s += time.perf_counter() - started
        self.costs.writes_unparsed += self._parse_failures.count - before
        events = out.get("results", []) if isinstance(out, dict) else list(out or [])
        self.costs.memories_written += sum(1 for e in events if e.get("event") == "ADD")
        return events

    def search(self, query: str, user_id: str, k: int) -> list[dict[str, Any]]:
        """Mem0's ranked hits for ``query`` among ``user_id``'s memories (at most ``k``)."""
        started = time.perf_counter()
        try:
            if not query.strip():
                return []  # Mem0 refuses an empty query; nothing is relevant to it
            return self.memory.search(query, top_k=k, filters={"user_id": user_id}).get("results", [])
        finally:
            self.costs.searches += 1
            self.costs.search_wall_s += time.perf_counter() - started

    def all(self, user_id: str) -> list[dict[str, Any]]:
        """Every memory of ``user_id``, oldest first."""
        out = self.memory.get_all(filters={"user_id": user_id}, top_k=100000)
        rows = out.get("results", []) if isinstance(out, dict) else list(out or [])
        return sorted(rows, key=lambda r: str(r.get("created_at") or ""))

    def delete(self, memory_id: str) -> None:
        self.memory.delete(memory_id)

    def close(self) -> None:
        close = getattr(self.memory, "close", None)
        if close is not None:
            close()


def _refused(exc: BaseException) -> bool:
    """The endpoint answered the request with a 4xx (it will never succeed as sent)."""
    status = getattr(exc.__cause__, "status_code", None)
    return isinstance(status, int) and 400 <= status < 500 and status != 429
