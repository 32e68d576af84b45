"""A copy-on-write vector store of memory entries.

Layout: a chain of immutable ``Segment``s shared between a store and its forks, plus a small
mutable tail of the store's own writes. ``fork()`` seals the tail into the chain and hands the
child the same chain, so forking a 100K-entry store copies nothing; the child's writes land in
its own tail, invisible to the parent and to its siblings.

Sealed segments are merged in the manner of a log-structured tree (two neighbours merge when the
newer one is at least half the size of the older), so the chain stays O(log n) long and each
entry is re-indexed O(log n) times in all.

Ranking is by exact cosine similarity (vectors are L2-normalised), ties broken by insertion
order, so the same entries give the same hits however the chain happens to be split.

Entries are never deleted: an UPDATE or MERGE writes a new entry naming the ones it replaces
(``Entry.predecessors``), and those are *superseded*. A search with ``live_only=True`` leaves
them out (the current view of the user); the default keeps them, since MemBuilder retrieves
history as well (protocols §1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np

from membuilder.memory.embedding_cache import EmbeddingCache
from membuilder.memory.entry import MEMORY_TYPES, Entry, Hit
from membuilder.memory.segment import Segment, Tail, merge_segments, normalise_text

SEAL_AT = 1_024  # tail size at which the tail is sealed into a segment even without a fork
FUZZY_MIN = 0.9  # cosine above which a quoted memory that is not verbatim still names an entry


def check_finite(entries: Sequence[Entry], vectors: np.ndarray) -> None:
    """Refuse a NaN or infinite vector where it is written: the loader refuses it too, so a store
    that accepted one would save a bank that can never be loaded again."""
    bad = ~np.isfinite(vectors).all(axis=1) if vectors.ndim == 2 else np.zeros(0, bool)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(f"entry {entries[row].id!r} ({entries[row].text[:80]!r}): its vector is not finite "
                         "(NaN or inf); nothing was written")


class VectorStore:
    def __init__(self, cache: EmbeddingCache):
        self.cache = cache
        self.dim = cache.dim
        self._chain: tuple[Segment, ...] = ()
        self._tail = Tail(self.dim)
        self._next_seq = 0

    # ---- writing -------------------------------------------------------------------------
    def add(self, entries: Sequence[Entry], vectors: np.ndarray | None = None) -> None:
        if not entries:
            return
        if vectors is None:
            vectors = self.cache.embed([e.text for e in entries])
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (len(entries), self.dim):
            raise ValueError(f"expected vectors of shape ({len(entries)}, {self.dim}), got {vectors.shape}")
        check_finite(entries, vectors)
        for e, v in zip(entries, vectors):
            if self.get(e.id) is not None:
                raise ValueError(f"entry id {e.id!r} is already in the store")
            self._tail.append(e, v, self._next_seq)
            self._next_seq += 1
        if len(self._tail) >= SEAL_AT:
            self._seal()

    def extend_sealed(self, entries: Sequence[Entry], vectors: np.ndarray) -> None:
        """Bulk load: add many entries as one segment (one index build instead of many merges)."""
        check_finite(entries, np.asarray(vectors, dtype=np.float32))
        self._seal()
        seqs = np.arange(self._next_seq, self._next_seq + len(entries), dtype=np.int64)
        self._next_seq += len(entries)
        self._push(Segment(entries, vectors, seqs))

    def _seal(self) -> None:
        if not len(self._tail):
            return
        seg = self._tail.freeze()
        self._tail = Tail(self.dim)
        self._push(seg)

    def _push(self, seg: Segment) -> None:
        chain = list(self._chain) + [seg]
        while len(chain) >= 2 and 2 * len(chain[-1]) >= len(chain[-2]):
            newer = chain.pop()
            chain[-1] = merge_segments([chain[-1], newer])
        self._chain = tuple(chain)

    def restore(self, chain: Sequence[Segment], next_seq: int) -> None:
        """Load a saved layout into an empty store (``MemoryBank.load``), segments as they were saved."""
        if len(self):
            raise ValueError("restore needs an empty store")
        self._chain = tuple(chain)
        self._next_seq = int(next_seq)

    def fork(self) -> VectorStore:
        self._seal()
        child = VectorStore.__new__(VectorStore)
        child.cache = self.cache
        child.dim = self.dim
        child._chain = self._chain
        child._tail = Tail(self.dim)
        child._next_seq = self._next_seq
        return child

    # ---- reading -------------------------------------------------------------------------
    def segments(self) -> tuple[Segment | Tail, ...]:
        """Every part this store reads, oldest first (the tail last, when it has entries)."""
        return self._chain + ((self._tail,) if len(self._tail) else ())

    def __len__(self) -> int:
        return sum(len(s) for s in self._chain) + len(self._tail)

    def entries(self, types: Sequence[str] | None = None) -> Iterator[Entry]:
        """All entries in insertion order."""
        for seg in self.segments():
            for e in seg.entries:
                if types is None or e.type in types:
                    yield e

    def vectors(self) -> np.ndarray:
        segs = self.segments()
        return np.concatenate([s.vectors for s in segs]) if segs else np.zeros((0, self.dim), np.float32)

    def superseded(self) -> frozenset[str]:
        """Ids of the entries an UPDATE or MERGE of this store has replaced (kept, marked, as history)."""
        segs = self.segments()
        key = tuple(map(id, self._chain)) + (len(self._tail),)
        cached = getattr(self, "_superseded", None)
        if cached is None or cached[0] != key:
            out = frozenset().union(*(s.supersedes for s in segs)) if segs else frozenset()
            self._superseded = cached = (key, out)
        return cached[1]

    def is_live(self, entry_id: str) -> bool:
        return entry_id not in self.superseded()

    def get(self, entry_id: str) -> Entry | None:
        for seg in reversed(self.segments()):
            row = seg.by_id.get(entry_id)
            if row is not None:
                return seg.entries[row]
        return None

    def resolve(self, mtype: str, text: str) -> tuple[Entry | None, str]:
        """Find the entry a model quoted: verbatim (ignoring case and spacing), else a near paraphrase.

        Returns the entry (the newest one if several match) and how it was found:
        "exact", "similar", or "missing".
        """
        key = (mtype, normalise_text(text))
        for seg in reversed(self.segments()):
            rows = seg.by_text.get(key)
            if rows:
                return seg.entries[rows[-1]], "exact"
        if not text.strip():
            return None, "missing"
        hits = self.search(self.cache.embed([text]), k=1, types=(mtype,))[0]
        if hits and hits[0].score >= FUZZY_MIN:
            return hits[0].entry, "similar"
        return None, "missing"

    def search(self, query_vectors: np.ndarray, k: int = 10, types: Sequence[str] | None = None,
               live_only: bool = False) -> list[list[Hit]]:
        """Top-k hits for each query vector (rows of ``query_vectors``); ``live_only`` leaves superseded entries out."""
        return search_stores([self] * len(query_vectors), query_vectors, k, types, live_only)


_BLAS = None
SINGLE_THREAD_BELOW = 16  # distinct queries under which matrix-vector products run on one BLAS thread


def _blas_threads(n_queries: int):
    """One BLAS thread for a handful of queries.

    A product of a few query vectors with a few thousand entries takes 0.1 ms; handing it to a
    second BLAS thread costs more than it saves, and when the other core is busy (a model
    generating beside the search) it cost 24 ms instead of 2.6 ms at 10K entries.
    """
    global _BLAS
    if n_queries >= SINGLE_THREAD_BELOW:
        return contextlib.nullcontext()
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")


def search_stores(
    stores: Sequence[VectorStore],
    query_vectors: np.ndarray,
    k: int = 10,
    types: Sequence[str] | None = None,
    live_only: bool = False,
) -> list[list[Hit]]:
    """Search ``stores[i]`` with ``query_vectors[i]`` for every i, sharing work between forks.

    Forks of one snapshot share its segments; a segment is searched once for each distinct query
    over all the stores that read it. Scoring G candidate memories against the same questions
    therefore costs one search of the shared snapshot plus G searches of small tails.

    ``live_only``: each store's superseded entries are left out. Which entries are superseded
    depends on the store (a fork's UPDATE supersedes a snapshot entry for that fork only), so a
    shared segment is searched for k plus as many extra hits as the most any reader excludes
    from it, and each store drops its own before merging: the result is exactly the top-k of the
    store's live entries.
    """
    types = tuple(types) if types else MEMORY_TYPES
    for t in types:
        if t not in MEMORY_TYPES:
            raise ValueError(f"unknown memory type {t!r}; expected some of {MEMORY_TYPES}")
    q = np.ascontiguousarray(query_vectors, dtype=np.float32)
    if q.ndim != 2 or len(q) != len(stores):
        raise ValueError("search_stores: one query vector per store is required")
    if k <= 0 or not len(q):
        return [[] for _ in range(len(q))]

    # Distinct query vectors, and for every segment the distinct queries that must search it.
    qkeys: dict[bytes, int] = {}
    qslot = [qkeys.setdefault(v.tobytes(), len(qkeys)) for v in q]
    uniq = np.stack([q[qslot.index(s)] for s in range(len(qkeys))])
    plan: dict[int, tuple[Segment, set[int]]] = {}
    store_segments = [s.segments() for s in stores]
    excluded = [s.superseded() if live_only else frozenset() for s in stores]
    extra: dict[int, int] = {}  # segment -> the most entries any of its readers drops from it
    dropped: dict[tuple[int, int], int] = {}
    for i, segs in enumerate(store_segments):
        for seg in segs:
            plan.setdefault(id(seg), (seg, set()))[1].add(qslot[i])
            if excluded[i]:
                key = (id(excluded[i]), id(seg))
                if key not in dropped:
                    dropped[key] = sum(1 for e in excluded[i] if e in seg.by_id)
                extra[id(seg)] = max(extra.get(id(seg), 0), dropped[key])

    # Each segment's top-k for each distinct query, exactly re-scored and ranked once, whatever
    # number of stores read it. Row-wise products summed along the last axis give an entry the
    # same float32 score whichever segment holds it, so ties and near-ties rank the same after a
    # save/load or a merge of segments.
    ranked: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, list[Hit]]] = {}
    with _blas_threads(len(uniq)):
        for sid, (seg, slots) in plan.items():
            order = sorted(slots)
            want = k + extra.get(sid, 0)
            for slot, rows in zip(order, seg.candidates(uniq[order], want, types)):
                if not len(rows):
                    continue
                scores = (seg.vectors[rows] * uniq[slot]).sum(axis=1)
                seqs = seg.seqs[rows]
                top = np.lexsort((seqs, -scores))[:want]
                ranked[(sid, slot)] = (scores[top], seqs[top],
                                       [Hit(seg.entries[int(rows[j])], float(scores[j])) for j in top])

    # A store's top-k is the top-k of its segments' top-ks (seqs are unique within a store).
    # Stores that read the same segments (forks that wrote nothing, candidates sharing a store)
    # get the same list, merged once.
    merged: dict[tuple, list[Hit]] = {}
    results = []
    for i, segs in enumerate(store_segments):
        key = (qslot[i], excluded[i], *map(id, segs))
        if key not in merged:
            parts = [ranked[(id(seg), qslot[i])] for seg in segs if (id(seg), qslot[i]) in ranked]
            if excluded[i]:
                parts = [_drop(part, excluded[i]) for part in parts]
            parts = [part for part in parts if part[2]]
            if len(parts) <= 1:
                merged[key] = parts[0][2][:k] if parts else []
            else:
                pool = [h for part in parts for h in part[2]]
                order = np.lexsort((np.concatenate([part[1] for part in parts]),
                                    -np.concatenate([part[0] for part in parts])))[:k]
                merged[key] = [pool[j] for j in order]
        results.append(list(merged[key]))
    return results


def _drop(part: tuple[np.ndarray, np.ndarray, list[Hit]], ids: frozenset[str]):
    """A segment's ranked hits without the entries in ``ids``."""
    keep = [j for j, h in enumerate(part[2]) if h.id not in ids]
    if len(keep) == len(part[2]):
        return part
    return part[0][keep], part[1][keep], [part[2][j] for j in keep]
