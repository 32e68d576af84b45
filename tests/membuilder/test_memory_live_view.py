"""The live view: a search that leaves out entries an UPDATE or MERGE replaced, exactly, across forks."""

from __future__ import annotations

import numpy as np

from membuilder.memory import EmbeddingCache, Entry, MemoryBank, VectorStore, search_stores

TYPES = ("episodic", "semantic", "procedural")


def unit_vectors(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def top_live(vectors, query, k, dead) -> list[str]:
    rows = [i for i in range(len(vectors)) if f"e{i}" not in dead]
    scores = np.array([(vectors[i] * query).sum() for i in rows])
    return [f"e{rows[j]}" for j in np.lexsort((np.array(rows), -scores))[:k]]


def test_live_search_is_the_top_k_of_live_entries_in_every_fork():
    vecs = unit_vectors(500)
    store = VectorStore(EmbeddingCache(dim=32))
    # 300 plain entries, sealed into segments, then 60 updates each replacing an old entry
    for start in range(0, 300, 50):
        store.add([Entry(f"e{i}", TYPES[i % 3], f"t{i}") for i in range(start, start + 50)], vecs[start:start + 50])
        store.fork()
    store.add([Entry(f"e{i}", TYPES[i % 3], f"t{i}", predecessors=(f"e{i - 300}",)) for i in range(300, 360)],
              vecs[300:360])
    snapshot_dead = {f"e{i}" for i in range(0, 60)}
    assert store.superseded() == snapshot_dead
    # two forks: one replaces many more of the snapshot's entries (all near the queries), one writes nothing
    queries = unit_vectors(6, seed=3)
    near = {int(j) for q in queries for j in np.argsort(-(vecs[:300] @ q))[:15]}
    a, b = store.fork(), store.fork()
    a.add([Entry(f"e{360 + n}", "semantic", f"u{n}", predecessors=(f"e{j}",)) for n, j in enumerate(sorted(near))],
          vecs[360:360 + len(near)])
    dead_a = snapshot_dead | {f"e{j}" for j in near}
    stores = [a] * len(queries) + [b] * len(queries)
    got = search_stores(stores, np.concatenate([queries, queries]), k=10, live_only=True)
    for i, q in enumerate(queries):
        assert [h.id for h in got[i]] == top_live(vecs[:360 + len(near)], q, 10, dead_a)
        assert [h.id for h in got[len(queries) + i]] == top_live(vecs[:360], q, 10, snapshot_dead)
    # the default view keeps the history
    full = search_stores([a], queries[:1], k=1000)[0]
    assert {f"e{j}" for j in near} <= {h.id for h in full}


def test_bank_live_view_survives_save_and_load(tmp_path, embedder):
    bank = MemoryBank(embedder)
    bank.apply("semantic", '{"operations": [{"action": "ADD", "memory": "Coffee: espresso"}]}', time="2024-01-01")
    bank.apply("semantic", '{"operations": [{"action": "UPDATE", "old_memory": "Coffee: espresso", '
                           '"new_memory": "Coffee: pour-over; previously espresso"}]}', time="2024-02-01")
    old = next(e for e in bank.entries() if e.text == "Coffee: espresso")
    assert bank.superseded() == {old.id}
    assert [h.entry.text for h in bank.retrieve("how do I make coffee", k=5, live_only=True)] == \
        ["Coffee: pour-over; previously espresso"]
    assert len(bank.retrieve("how do I make coffee", k=5)) == 2  # history still searchable on request
    bank.save(tmp_path / "bank")
    again = MemoryBank.load(tmp_path / "bank", embedder)
    assert again.superseded() == bank.superseded()
    assert [h.id for h in again.retrieve("coffee", k=5, live_only=True)] == \
        [h.id for h in bank.retrieve("coffee", k=5, live_only=True)]
