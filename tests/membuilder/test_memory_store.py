"""The copy-on-write vector store: segment chains, HNSW segments, shared search across forks."""

from __future__ import annotations

import numpy as np
import pytest

from membuilder.memory import EmbeddingCache, Entry, MemoryBank, VectorStore, search_stores
from membuilder.memory import segment as segment_module

TYPES = ("episodic", "semantic", "procedural")


def unit_vectors(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def entries(n: int, start: int = 0) -> list[Entry]:
    return [Entry(f"e{i}", TYPES[i % 3], f"text {i}") for i in range(start, start + n)]


def brute_force(vectors: np.ndarray, query: np.ndarray, k: int, rows=None) -> list[int]:
    rows = np.arange(len(vectors)) if rows is None else np.asarray(rows)
    scores = (vectors[rows] * query).sum(axis=1)
    return [int(rows[i]) for i in np.lexsort((rows, -scores))[:k]]


def test_chain_stays_short_and_search_matches_brute_force():
    store = VectorStore(EmbeddingCache(dim=32))
    vecs = unit_vectors(3000)
    for start in range(0, 3000, 100):  # many small writes, each followed by a fork
        store.add(entries(100, start), vecs[start:start + 100])
        store.fork()
    assert len(store.segments()) <= 12  # log-structured merging keeps the chain O(log n)
    queries = unit_vectors(20, seed=1)
    for q, hits in zip(queries, store.search(queries, k=10)):
        assert [int(h.id[1:]) for h in hits] == brute_force(vecs, q, 10)


def test_type_filter_searches_only_that_type():
    store = VectorStore(EmbeddingCache(dim=32))
    vecs = unit_vectors(300)
    store.add(entries(300), vecs)
    q = unit_vectors(1, seed=2)
    hits = store.search(q, k=5, types=["procedural"])[0]
    assert [int(h.id[1:]) for h in hits] == brute_force(vecs, q[0], 5, rows=range(2, 300, 3))


def test_large_segments_use_hnsw_with_exact_rescoring(monkeypatch):
    monkeypatch.setattr(segment_module, "HNSW_MIN", 500)
    store = VectorStore(EmbeddingCache(dim=32))
    vecs = unit_vectors(3000)
    store.extend_sealed(entries(3000), vecs)
    assert all(t in store.segments()[0]._graphs for t in TYPES)
    queries = unit_vectors(50, seed=3)
    recall = []
    for q, hits in zip(queries, store.search(queries, k=10)):
        got = [int(h.id[1:]) for h in hits]
        truth = brute_force(vecs, q, 10)
        recall.append(len(set(got) & set(truth)) / 10)
        # Scores are exact cosine similarities even when candidates come from the graph.
        assert [h.score for h in hits] == pytest.approx([float(vecs[i] @ q) for i in got], abs=1e-6)
    assert np.mean(recall) >= 0.95


def test_hnsw_bank_reloads_with_identical_results(monkeypatch, tmp_path):
    monkeypatch.setattr(segment_module, "HNSW_MIN", 500)
    cache = EmbeddingCache(dim=32)
    bank = MemoryBank(cache=cache)
    vecs = unit_vectors(2400)
    bank.add_entries(entries(2400), vecs)
    bank.save(tmp_path / "bank")
    assert list((tmp_path / "bank").glob("graph-*.npy"))
    loaded = MemoryBank.load(tmp_path / "bank", cache=cache)
    queries = unit_vectors(30, seed=4)
    assert [[h.id for h in r] for r in bank.store.search(queries, 10)] == [[h.id for h in r] for r in loaded.store.search(queries, 10)]


def test_search_across_forks_equals_searching_each_fork_alone():
    base = VectorStore(EmbeddingCache(dim=32))
    vecs = unit_vectors(1200)
    base.add(entries(1000), vecs[:1000])
    forks = [base.fork() for _ in range(4)]
    for i, f in enumerate(forks):
        f.add(entries(50, 1000 + 50 * i), vecs[1000 + 50 * i: 1050 + 50 * i])
    queries = unit_vectors(5, seed=5)
    stores = [f for f in forks for _ in queries]
    qs = np.concatenate([queries] * len(forks))
    together = search_stores(stores, qs, k=10)
    alone = [hits for f in forks for hits in f.search(queries, k=10)]
    assert [[h.id for h in r] for r in together] == [[h.id for h in r] for r in alone]


def test_duplicate_ids_and_wrong_shapes_are_rejected():
    store = VectorStore(EmbeddingCache(dim=32))
    store.add(entries(1), unit_vectors(1))
    with pytest.raises(ValueError, match="already in the store"):
        store.add(entries(1), unit_vectors(1))
    with pytest.raises(ValueError, match="shape"):
        store.add(entries(1, 5), unit_vectors(1, dim=8))
    with pytest.raises(ValueError, match="unknown memory type"):
        store.search(unit_vectors(1), k=3, types=["working"])
