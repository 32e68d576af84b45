"""Loading a damaged or tampered memory bank: every fault is one ValueError naming the file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from membuilder.memory import MemoryBank


@pytest.fixture
def saved(embedder, tmp_path):
    bank = MemoryBank(embedder)
    for i in range(4):
        bank.apply("episodic", json.dumps({"operations": [{"action": "ADD", "memory": f"Note {i} about the trip"}]}))
    return bank.save(tmp_path / "bank")


def _edit(path, change):
    """Change bank.json's fields by hand. The checksums are dropped, as from a bank saved before
    they existed, so what is tested is the field check behind them."""
    meta = json.loads((path / "bank.json").read_text())
    meta.pop("checksums")
    change(meta)
    (path / "bank.json").write_text(json.dumps(meta))


def _flip_byte(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_damaged_npy_names_the_file(saved, embedder):
    _edit(saved, lambda m: None)  # unchecked: the .npy reader's own error is what is tested
    (saved / "vectors.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(ValueError, match=r"vectors\.npy: not a readable \.npy array"):
        MemoryBank.load(saved, embedder)


@pytest.mark.parametrize("name", ["vectors.npy", "seqs.npy"])
def test_a_flipped_byte_in_an_npy_file_names_the_file(saved, embedder, name):
    path = saved / name
    _flip_byte(path, path.stat().st_size - 3)  # inside the data: still a readable array
    np.load(path)
    with pytest.raises(ValueError, match=rf"{name}: damaged: its SHA-256 does not match"):
        MemoryBank.load(saved, embedder)


def test_a_flipped_byte_in_a_graph_file_names_the_file(tmp_path, monkeypatch):
    import membuilder.memory.segment as segment_module
    from membuilder.memory import EmbeddingCache, Entry

    monkeypatch.setattr(segment_module, "HNSW_MIN", 500)  # a graph without 16K vectors
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((1200, 32)).astype(np.float32)  # the tail is sealed at 1,024
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    bank = MemoryBank(cache=EmbeddingCache(dim=32))
    bank.add_entries([Entry(f"e{i}", "semantic", f"entry {i}") for i in range(len(vectors))], vectors)
    path = bank.save(tmp_path / "bank")
    graph = next(path.glob("graph-*.npy"))
    _flip_byte(graph, graph.stat().st_size // 2)
    with pytest.raises(ValueError, match=rf"{graph.name}: damaged"):
        MemoryBank.load(path, cache=EmbeddingCache(dim=32))


@pytest.mark.parametrize("old, new", [(b"Note 2 about", b"Note 3 about"), (b'"next_id": 4', b'"next_id": 5')])
def test_a_changed_byte_in_the_entries_of_bank_json_names_the_file(saved, embedder, old, new):
    text = (saved / "bank.json").read_bytes()
    assert text.count(old) == 1
    (saved / "bank.json").write_bytes(text.replace(old, new))  # still valid JSON of the right types
    with pytest.raises(ValueError, match=r"bank\.json: damaged: its content does not match"):
        MemoryBank.load(saved, embedder)


def test_a_bank_saved_before_checksums_loads(saved, embedder):
    meta = json.loads((saved / "bank.json").read_text())
    assert set(meta["checksums"]) == {"bank.json", "vectors.npy", "seqs.npy"}
    del meta["checksums"]  # bank.json as MemGym wrote it before checksums
    (saved / "bank.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1))
    loaded = MemoryBank.load(saved, embedder)
    assert sorted(e.text for e in loaded.entries()) == [f"Note {i} about the trip" for i in range(4)]


def test_a_missing_npy_names_the_file(saved, embedder):
    (saved / "seqs.npy").unlink()
    with pytest.raises(ValueError, match=r"seqs\.npy: missing"):
        MemoryBank.load(saved, embedder)


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(entries={"a": 1}), "field 'entries' must be list"),
    (lambda m: m.update(segments=[5]), r"segments\[0\]: expected an object"),
    (lambda m: m.update(core="x"), "field 'core' must be dict"),
    (lambda m: m["core"].update(events=[1]), "field 'events' holds a malformed event"),
    (lambda m: m["entries"][0].update(predecessors=5), r"entries\[0\]: field 'predecessors'"),
    (lambda m: m.update(next_id="7"), "field 'next_id' must be int"),
    (lambda m: m.update(dim=[384]), "field 'dim' must be int"),
])
def test_wrongly_typed_bank_json_names_file_and_field(saved, embedder, change, message):
    _edit(saved, change)
    with pytest.raises(ValueError, match=r"bank\.json.*" + message):
        MemoryBank.load(saved, embedder)


def test_nan_vectors_are_refused(saved, embedder):
    vectors = np.load(saved / "vectors.npy")
    vectors[2, 5] = np.nan
    np.save(saved / "vectors.npy", vectors)
    _edit(saved, lambda m: None)  # a NaN written before checksums existed (or with them recomputed)
    with pytest.raises(ValueError, match=r"vectors\.npy: row 2 .* is not finite"):
        MemoryBank.load(saved, embedder)


def test_repeated_entry_ids_are_refused(saved, embedder):
    _edit(saved, lambda m: m["entries"][3].update(id=m["entries"][0]["id"]))
    with pytest.raises(ValueError, match="repeats the id"):
        MemoryBank.load(saved, embedder)


@pytest.mark.parametrize("name", ["../outside.npy", "/etc/passwd", "graph-0-episodic.npy/../../outside.npy"])
def test_graph_file_names_stay_inside_the_bank_folder(saved, embedder, name):
    np.save(saved.parent / "outside.npy", np.zeros(4, np.uint8))
    _edit(saved, lambda m: m["segments"][0].update(graphs={"episodic": name}))
    with pytest.raises(ValueError, match="inside the bank folder"):
        MemoryBank.load(saved, embedder)
