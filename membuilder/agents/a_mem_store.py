"""One A-Mem store (PyPI ``a-mem``, module ``agentic_memory``) set up to run offline and be measured.

A-Mem runs as it ships: ``add_note`` asks the model for a note's keywords, context and tags,
then whether to link or re-describe its nearest neighbours ("evolution"); notes live in its own
ChromaDB collection, embedded by its own sentence-transformers wrapper (here over the local
MiniLM folder). We never touch its prompts or parsing; we only count:

* failed analyses and evolutions: A-Mem prints (analysis) or logs (evolution), and then shrugs
  off, a reply it cannot parse (the note keeps default keywords, or is not evolved);
* embedding calls and texts, through a counting wrapper around the sentence-transformers model
  its embedding function holds (that model is shared by every store in the process, so the
  wrapper sits on this store's function only);
* wall time inside A-Mem.

Offline: Chroma's telemetry is off (``ANONYMIZED_TELEMETRY=False``) and LiteLLM, which A-Mem
imports, reads its bundled price table (``LITELLM_LOCAL_MODEL_COST_MAP=True``). A-Mem's
``openai`` client takes its server only from ``OPENAI_BASE_URL``, set while the store is built
and while a note is added.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import time
from pathlib import Path
from typing import Any

from membuilder.agents.mem0_store import LoggedFailures

INSTALL_HINT = "A-Mem is an optional peer: pip install 'memgym[peers]' (or: pip install a-mem)"
FAILED_ANALYSIS = "Error analyzing content"  # printed by A-Mem
FAILED_EVOLUTION = ("Error in memory evolution", "Error in process_memory")  # logged by A-Mem
# What A-Mem's add_note stores for a note (its metadata), so a saved note is stored again as it was.
NOTE_FIELDS = ("id", "content", "keywords", "links", "retrieval_count", "timestamp", "last_accessed", "context",
               "evolution_history", "category", "tags")


def import_a_mem():
    """A-Mem's ``AgenticMemorySystem``, imported with telemetry off; a clear error when missing."""
    os.environ["ANONYMIZED_TELEMETRY"] = "False"
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    try:
        from agentic_memory.memory_system import AgenticMemorySystem
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    return AgenticMemorySystem


@contextlib.contextmanager
def base_url(url: str):
    """``OPENAI_BASE_URL`` set to ``url`` for the block (A-Mem's only way to take a server)."""
    old = os.environ.get("OPENAI_BASE_URL")
    os.environ["OPENAI_BASE_URL"] = url
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("OPENAI_BASE_URL", None)
        else:
            os.environ["OPENAI_BASE_URL"] = old


class _CountingModel:
    """A sentence-transformers model with its ``encode`` calls and texts counted into ``counts``."""

    def __init__(self, inner, counts: dict[str, float]):
        self._inner, self._counts = inner, counts

    def encode(self, sentences, *args, **kwargs):
        self._counts["embed_calls"] += 1
        self._counts["embedded_texts"] += 1 if isinstance(sentences, str) else len(sentences)
        return self._inner.encode(sentences, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def count_embeddings(memory) -> dict[str, float]:
    """Counts (``embed_calls``, ``embedded_texts``) of every embedding ``memory`` (an
    ``AgenticMemorySystem``) makes from now on, kept up to date in the returned dict."""
    counts = {"embed_calls": 0, "embedded_texts": 0}
    function = memory.retriever.embedding_function  # the object its Chroma collection calls
    function._model = _CountingModel(function._model, counts)
    return counts


def open_a_mem(folder: str | Path, embedder_path: str, endpoint):
    """``(AgenticMemorySystem, embedding counts)`` storing in ``folder``, analysing with ``endpoint``'s model."""
    cls = import_a_mem()
    with base_url(endpoint.base_url):
        memory = cls(model_name=embedder_path, llm_backend="openai", llm_model=endpoint.model,
                     api_key=endpoint.api_key, storage_path=str(folder))
    return memory, count_embeddings(memory)


def add_note(memory, endpoint, text: str, when: str | None, counts: dict[str, float]) -> str:
    """A-Mem's ``add_note``, with its failed analyses and evolutions and its wall time added to ``counts``."""
    printed, failures = io.StringIO(), LoggedFailures(FAILED_EVOLUTION)
    log = logging.getLogger("agentic_memory.memory_system")
    log.addHandler(failures)
    started = time.perf_counter()
    try:
        with base_url(endpoint.base_url), contextlib.redirect_stdout(printed):
            nid = memory.add_note(text, time=when or None)
    finally:
        log.removeHandler(failures)
    counts["a_mem_wall_s"] = counts.get("a_mem_wall_s", 0.0) + time.perf_counter() - started
    counts["notes"] = counts.get("notes", 0) + 1
    counts["failed_analyses"] = counts.get("failed_analyses", 0) + printed.getvalue().count(FAILED_ANALYSIS)
    counts["failed_evolutions"] = counts.get("failed_evolutions", 0) + failures.count
    return nid


def note_fields(note) -> dict[str, Any]:
    """A note as plain JSON (what ``restore_note`` stores again)."""
    return {k: getattr(note, k) for k in NOTE_FIELDS}


def restore_note(memory, fields: dict[str, Any]) -> str:
    """Store a saved note again as it was, without asking the model (``add_note`` would analyse
    and evolve it anew): A-Mem's own storage step, with the metadata ``add_note`` writes."""
    if not isinstance(fields, dict) or not str(fields.get("content", "")).strip() or not fields.get("id"):
        raise ValueError(f"a-mem: a saved note needs 'id' and 'content', got {str(fields)[:80]!r}")
    from agentic_memory.memory_system import MemoryNote  # the package is optional: loaded with the store

    note = MemoryNote(**{k: fields[k] for k in NOTE_FIELDS if k in fields})
    memory.retriever.add_document(note.content, note_fields(note), note.id)
    return note.id


def shown_note(note) -> str:
    """A note as an answerer sees it: its date, text, then context, keywords and tags."""
    extra = "; ".join(f"{name}: {value}" for name, value in (
        ("context", note.context if note.context != "General" else ""),
        ("keywords", ", ".join(note.keywords or [])), ("tags", ", ".join(note.tags or []))) if value)
    stamp = f"[{note.timestamp}] " if note.timestamp else ""
    return stamp + note.content + (f" ({extra})" if extra else "")
