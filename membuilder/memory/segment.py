"""An immutable run of entries with one search index per memory type.

A ``VectorStore`` is a chain of these plus a small mutable tail. Segments are never changed
after they are built, which is what lets a fork share them with its parent for free.

Small segments are searched exactly. A type with at least ``HNSW_MIN`` vectors in one segment
gets an HNSW graph (FAISS, inner product); its candidates are re-scored exactly, so returned
scores are always the true cosine similarities and only the candidate set is approximate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from membuilder.memory.entry import MEMORY_TYPES, Entry

HNSW_MIN = 16_384  # vectors of one type in one segment before an HNSW graph pays for itself
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 64
HNSW_EF_SEARCH = 128
OVERSAMPLE = 2  # candidates per segment = OVERSAMPLE * k, so exact re-scoring decides the ranking


def normalise_text(text: str) -> str:
    """The key under which UPDATE/MERGE look up the entry a model quoted."""
    return " ".join(text.split()).casefold()


class Segment:
    def __init__(
        self,
        entries: Sequence[Entry],
        vectors: np.ndarray,
        seqs: np.ndarray,
        graphs: dict[str, np.ndarray] | None = None,
    ):
        self.entries: tuple[Entry, ...] = tuple(entries)
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.seqs = np.asarray(seqs, dtype=np.int64)
        if len(self.entries) != len(self.vectors) or len(self.entries) != len(self.seqs):
            raise ValueError("segment: entries, vectors and sequence numbers differ in length")
        self.by_id = {e.id: i for i, e in enumerate(self.entries)}
        # ids this segment's UPDATE/MERGE entries replace (they may live in older segments)
        self.supersedes = frozenset(p for e in self.entries for p in e.predecessors)
        self.by_text: dict[tuple[str, str], list[int]] = {}
        rows: dict[str, list[int]] = {t: [] for t in MEMORY_TYPES}
        for i, e in enumerate(self.entries):
            rows[e.type].append(i)
            self.by_text.setdefault((e.type, normalise_text(e.text)), []).append(i)
        self.rows_of_type = {t: np.asarray(r, dtype=np.int64) for t, r in rows.items()}
        self._type_vectors = {t: self.vectors[r] for t, r in self.rows_of_type.items() if len(r)}
        self._graphs = {}
        for t, r in self.rows_of_type.items():
            if len(r) >= HNSW_MIN:
                blob = (graphs or {}).get(t)
                self._graphs[t] = _deserialize(blob) if blob is not None else _build_hnsw(self._type_vectors[t])

    def __len__(self) -> int:
        return len(self.entries)

    def graph_blobs(self) -> dict[str, np.ndarray]:
        """The HNSW graphs as byte arrays, saved beside the vectors so a reload searches identically."""
        import faiss

        return {t: faiss.serialize_index(g) for t, g in self._graphs.items()}

    def candidates(self, queries: np.ndarray, k: int, types: Sequence[str]) -> list[np.ndarray]:
        """Row indices of up to ``OVERSAMPLE * k`` likely neighbours per query, over the given types."""
        per_query: list[list[np.ndarray]] = [[] for _ in range(len(queries))]
        want = OVERSAMPLE * k
        for t in types:
            rows = self.rows_of_type[t]
            if not len(rows):
                continue
            kk = min(want, len(rows))
            if t in self._graphs:
                _, idx = self._graphs[t].search(queries, kk)
            else:
                scores = queries @ self._type_vectors[t].T
                if kk < len(rows):
                    idx = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
                else:
                    idx = np.broadcast_to(np.arange(len(rows)), scores.shape)
            for qi in range(len(queries)):
                found = idx[qi]
                per_query[qi].append(rows[found[found >= 0]])
        return [np.concatenate(c) if c else np.zeros(0, dtype=np.int64) for c in per_query]


def _build_hnsw(vectors: np.ndarray):
    import faiss

    index = faiss.IndexHNSWFlat(vectors.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    index.hnsw.efSearch = HNSW_EF_SEARCH
    # A parallel build links nodes in a different order on every run; one thread keeps the graph,
    # and so retrieval and rewards, identical for the same entries.
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        index.add(vectors)
    finally:
        faiss.omp_set_num_threads(threads)
    return index


def _deserialize(blob: np.ndarray):
    import faiss

    index = faiss.deserialize_index(np.asarray(blob, dtype=np.uint8))
    index.hnsw.efSearch = HNSW_EF_SEARCH
    return index


def merge_segments(segments: Sequence[Segment]) -> Segment:
    entries = [e for s in segments for e in s.entries]
    vectors = np.concatenate([s.vectors for s in segments]) if segments else np.zeros((0, 0), np.float32)
    seqs = np.concatenate([s.seqs for s in segments]) if segments else np.zeros(0, np.int64)
    return Segment(entries, vectors, seqs)


class Tail:
    """The mutable newest part of a store: appended to in place, searched exactly.

    Same reading interface as ``Segment`` (entries, vectors, seqs, by_id, by_text, candidates),
    kept up to date per write, so a write costs O(1) amortised rather than a rebuild.
    """

    def __init__(self, dim: int):
        self.dim = dim
        self.entries: list[Entry] = []
        self.by_id: dict[str, int] = {}
        self.by_text: dict[tuple[str, str], list[int]] = {}
        self._supersedes: set[str] = set()
        self._vecs = np.empty((16, dim), dtype=np.float32)
        self._seqs = np.empty(16, dtype=np.int64)
        self._rows: dict[str, list[int]] = {t: [] for t in MEMORY_TYPES}
        self._tvecs = {t: np.empty((16, dim), dtype=np.float32) for t in MEMORY_TYPES}

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def vectors(self) -> np.ndarray:
        return self._vecs[: len(self.entries)]

    @property
    def seqs(self) -> np.ndarray:
        return self._seqs[: len(self.entries)]

    @property
    def supersedes(self) -> frozenset[str]:
        return frozenset(self._supersedes)

    @staticmethod
    def _grow(buf: np.ndarray, need: int) -> np.ndarray:
        if need <= len(buf):
            return buf
        bigger = np.empty((max(need, 2 * len(buf)), *buf.shape[1:]), dtype=buf.dtype)
        bigger[: len(buf)] = buf
        return bigger

    def append(self, entry: Entry, vector: np.ndarray, seq: int) -> None:
        row = len(self.entries)
        self._vecs = self._grow(self._vecs, row + 1)
        self._seqs = self._grow(self._seqs, row + 1)
        self._vecs[row] = vector
        self._seqs[row] = seq
        rows = self._rows[entry.type]
        self._tvecs[entry.type] = self._grow(self._tvecs[entry.type], len(rows) + 1)
        self._tvecs[entry.type][len(rows)] = vector
        rows.append(row)
        self.entries.append(entry)
        self.by_id[entry.id] = row
        self.by_text.setdefault((entry.type, normalise_text(entry.text)), []).append(row)
        self._supersedes.update(entry.predecessors)

    def candidates(self, queries: np.ndarray, k: int, types: Sequence[str]) -> list[np.ndarray]:
        per_query: list[list[np.ndarray]] = [[] for _ in range(len(queries))]
        want = OVERSAMPLE * k
        for t in types:
            rows = self._rows[t]
            if not rows:
                continue
            scores = queries @ self._tvecs[t][: len(rows)].T
            kk = min(want, len(rows))
            idx = np.argpartition(-scores, kk - 1, axis=1)[:, :kk] if kk < len(rows) else \
                np.broadcast_to(np.arange(len(rows)), scores.shape)
            rows_arr = np.asarray(rows, dtype=np.int64)
            for qi in range(len(queries)):
                per_query[qi].append(rows_arr[idx[qi]])
        return [np.concatenate(c) if c else np.zeros(0, dtype=np.int64) for c in per_query]

    def graph_blobs(self) -> dict[str, np.ndarray]:
        return {}  # the tail is always searched exactly

    def freeze(self) -> Segment:
        return Segment(self.entries, self.vectors.copy(), self.seqs.copy())
