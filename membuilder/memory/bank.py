"""The memory bank: Core block + Episodic, Semantic and Procedural entries in one vector store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from membuilder.llm.embedders import Embedder
from membuilder.memory.core import CORE_LIMIT, Compressor, CoreBlock, CoreEvent
from membuilder.memory.embedding_cache import EmbeddingCache
from membuilder.memory.entry import MEMORY_TYPES, Entry, Hit
from membuilder.memory.ops import (
    Add,
    CoreAppend,
    CoreReplace,
    CoreRewrite,
    Op,
    Parsed,
    Skip,
    Update,
    entry_texts,
    parse,
    quoted_texts,
    written_text,
)
from membuilder.memory.persist import read_bank, save_bank
from membuilder.memory.store import VectorStore, search_stores

_ID_PREFIX = {"episodic": "epi", "semantic": "sem", "procedural": "pro"}


@dataclass
class Applied:
    """What one agent's output did to the bank."""

    agent: str
    ops: list[Op] = field(default_factory=list)
    valid: bool = False
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    added_ids: list[str] = field(default_factory=list)
    core_events: list[CoreEvent] = field(default_factory=list)
    # Existing memory the output's edits quote (UPDATE/MERGE entries, Core REPLACE text) and how many of those
    # quotes matched nothing: a missed UPDATE lands as a new entry beside the one it meant to replace.
    quoted: int = 0
    quoted_missing: int = 0

    @property
    def new_text(self) -> str:
        """The text this output wrote (for length penalties); empty when it wrote nothing."""
        return written_text(self.ops) if self.valid else ""


class MemoryBank:
    """Core + a copy-on-write vector store, edited only through the agents' JSON operations.

    >>> bank = MemoryBank(embedder)                                      # doctest: +SKIP
    >>> bank.apply("semantic", '{"operations": [{"action": "ADD", "memory": "Luna: a cat"}]}')
    >>> bank.retrieve("what pet does the user have?", k=10)
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        cache: EmbeddingCache | None = None,
        core_limit: int = CORE_LIMIT,
        compressor: Compressor | None = None,
    ):
        self.cache = cache if cache is not None else EmbeddingCache(embedder)
        self.core = CoreBlock(limit=core_limit, compressor=compressor)
        self.store = VectorStore(self.cache)
        self._next_id = 0

    # ---- writing -------------------------------------------------------------------------
    def apply(self, agent: str, output: object, *, time: str | None = None, session: str | None = None) -> Applied:
        """Parse one agent's raw output and apply it. Never raises on model output.

        An invalid output (bad JSON, an action the agent may not use, a missing key) changes
        nothing: the reward's validity gate treats that agent as having done nothing.
        """
        return self.apply_parsed(parse(agent, output), time=time, session=session)

    def apply_parsed(self, parsed: Parsed, *, time: str | None = None, session: str | None = None) -> Applied:
        out = Applied(parsed.agent, list(parsed.ops), parsed.valid, list(parsed.errors), list(parsed.warnings))
        if not parsed.valid:
            return out
        if parsed.agent == "core":
            for op in parsed.ops:
                events = self._apply_core(op)
                if isinstance(op, CoreReplace):
                    out.quoted += 1
                    out.quoted_missing += any(e.kind == "replace_missing" for e in events)
                out.core_events += events
            out.warnings += [f"core: {e.kind}: {e.detail}" for e in out.core_events]
            return out
        self._apply_entries(parsed.agent, parsed.ops, time, session, out)
        return out

    def _apply_core(self, op: Op) -> list[CoreEvent]:
        if isinstance(op, CoreAppend):
            return self.core.append(op.content)
        if isinstance(op, CoreReplace):
            return self.core.replace(op.old_text, op.new_text)
        if isinstance(op, CoreRewrite):
            return self.core.rewrite(op.content)
        raise TypeError(f"not a core operation: {op!r}")

    def _apply_entries(self, mtype: str, ops: Sequence[Op], time: str | None, session: str | None, out: Applied) -> None:
        texts = entry_texts(ops)  # one embedder call for everything this output writes or quotes
        if texts:
            self.cache.embed(texts)
        for i, op in enumerate(ops):
            if isinstance(op, Skip):
                continue
            if isinstance(op, Add):
                self._add(mtype, op.memory, time, session, out)
                continue
            found = []
            for q in quoted_texts(op):
                entry, how = self.store.resolve(mtype, q)
                out.quoted += 1
                if entry is None:
                    out.quoted_missing += 1
                    out.warnings.append(
                        f"operations[{i}] {op.action}: no {mtype} memory matches {q[:60]!r}; written as a new entry"
                    )
                elif entry.id not in (f.id for f in found):
                    found.append(entry)
                    if how == "similar":
                        out.warnings.append(f"operations[{i}] {op.action}: quoted text matched {entry.id} by similarity")
            ids = tuple(e.id for e in found)
            if isinstance(op, Update):
                self._add(mtype, op.new_memory, time, session, out, predecessors=ids)
            else:
                times = [t for t in [*(e.time for e in found), time] if t]
                time_range = (times[0], times[-1]) if times else None
                self._add(mtype, op.new_memory, time, session, out, predecessors=ids, evidence=ids, time_range=time_range)

    def _add(self, mtype, text, time, session, out: Applied, predecessors=(), evidence=(), time_range=None) -> None:
        vector = self.cache.embed([text])
        if not np.isfinite(vector).all():
            # The embedder failed on this text: the write is dropped and logged, the bank stays loadable.
            out.warnings.append(f"{mtype}: not written, the embedder gave a non-finite vector for {text[:60]!r}")
            return
        entry_id = f"{_ID_PREFIX[mtype]}-{self._next_id:05d}"
        while self.store.get(entry_id) is not None:  # ids loaded from elsewhere may sit ahead
            self._next_id += 1
            entry_id = f"{_ID_PREFIX[mtype]}-{self._next_id:05d}"
        entry = Entry(
            id=entry_id,
            type=mtype,
            text=text,
            time=time,
            predecessors=tuple(predecessors),
            evidence=tuple(evidence),
            time_range=time_range,
            session=session,
        )
        self._next_id += 1
        self.store.add([entry], vector)
        out.added_ids.append(entry.id)

    def add_entries(self, entries: Sequence[Entry], vectors: np.ndarray | None = None) -> None:
        """Insert ready-made entries (loaders, benchmarks); ids must be new to this bank."""
        if vectors is not None and len(entries) >= 1024:
            self.store.extend_sealed(entries, vectors)
        else:
            self.store.add(entries, vectors)
        self._next_id = max(self._next_id, len(self.store))

    # ---- reading -------------------------------------------------------------------------
    def retrieve(self, query: str, k: int = 10, types: Sequence[str] | None = None,
                 live_only: bool = False) -> list[Hit]:
        """Top-k entries for ``query``; ``live_only`` leaves out entries an UPDATE or MERGE replaced."""
        return self.retrieve_many([query], k, types, live_only)[0]

    def retrieve_many(self, queries: Sequence[str], k: int = 10, types: Sequence[str] | None = None,
                      live_only: bool = False) -> list[list[Hit]]:
        return retrieve_across([self] * len(queries), queries, k, types, live_only)

    def superseded(self) -> frozenset[str]:
        """Ids of entries an UPDATE or MERGE replaced: kept for history, left out of a live view."""
        return self.store.superseded()

    def view(self, agent: str, query: str, k: int = 20) -> list[Hit]:
        """An agent's own memories most related to ``query``: what its construction prompt shows."""
        if agent not in MEMORY_TYPES:
            raise ValueError(f"agent {agent!r} has no searchable memory; expected one of {MEMORY_TYPES}")
        return self.retrieve(query, k, (agent,))

    def session_view(self, agent: str, texts: Sequence[str], k: int = 20, live_only: bool = False) -> list[Hit]:
        """An agent's own memories most related to any of ``texts`` (a session's messages).

        Each message is a query; an entry keeps its best score over them. One embedder call and
        one batched search, however long the session. ``live_only`` leaves out entries an UPDATE or MERGE replaced.
        """
        if agent not in MEMORY_TYPES:
            raise ValueError(f"agent {agent!r} has no searchable memory; expected one of {MEMORY_TYPES}")
        texts = [t for t in texts if t.strip()]
        if not texts or not len(self):
            return []
        best: dict[str, Hit] = {}
        for hits in self.retrieve_many(texts, k, (agent,), live_only):
            for h in hits:
                if h.id not in best or h.score > best[h.id].score:
                    best[h.id] = h
        return sorted(best.values(), key=lambda h: (-h.score, h.id))[:k]

    def get(self, entry_id: str) -> Entry | None:
        return self.store.get(entry_id)

    def entries(self, types: Sequence[str] | None = None) -> list[Entry]:
        return list(self.store.entries(types))

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(MEMORY_TYPES, 0)
        for e in self.store.entries():
            counts[e.type] += 1
        return counts

    def __len__(self) -> int:
        return len(self.store)

    # ---- copies and files ----------------------------------------------------------------
    def fork(self) -> MemoryBank:
        """A copy-on-write child: O(1), shares the index and the embedding cache."""
        child = MemoryBank.__new__(MemoryBank)
        child.cache = self.cache
        child.core = self.core.copy()
        child.store = self.store.fork()
        child._next_id = self._next_id
        return child

    def with_core(self, core: CoreBlock) -> MemoryBank:
        """A bank that reads this bank's entries (the same store object, not a copy) with ``core``.

        Scoring G candidates: those that wrote the same entries but different Core blocks share
        one store, so its writes are applied and searched once. Writing entries into either bank
        shows in both; fork one first.
        """
        twin = MemoryBank.__new__(MemoryBank)
        twin.cache = self.cache
        twin.core = core
        twin.store = self.store
        twin._next_id = self._next_id
        return twin

    def save(self, path: str | Path) -> Path:
        return save_bank(self, Path(path))

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder | None = None, *, cache: EmbeddingCache | None = None,
             compressor: Compressor | None = None) -> MemoryBank:
        parts = read_bank(Path(path), embedder=embedder, cache=cache, compressor=compressor)
        bank = cls(cache=parts.cache, compressor=compressor)
        bank.core = parts.core
        bank.store.restore(parts.chain, parts.next_seq)
        bank._next_id = parts.next_id
        return bank


def retrieve_across(
    banks: Sequence[MemoryBank], queries: Sequence[str], k: int = 10, types: Sequence[str] | None = None,
    live_only: bool = False,
) -> list[list[Hit]]:
    """Answer ``queries[i]`` from ``banks[i]`` for all i in one pass (see ``search_stores``)."""
    if len(banks) != len(queries):
        raise ValueError("retrieve_across: one bank per query is required")
    if not queries:
        return []
    vectors = banks[0].cache.embed(list(queries))
    return search_stores([b.store for b in banks], vectors, k, types, live_only)
