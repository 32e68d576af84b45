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
    meta = json.loads((path / "bank.json").read_text())
    change(meta)
    (path / "bank.json").write_text(json.dumps(meta))


def test_a_damaged_npy_names_the_file(saved, embedder):
    (saved / "vectors.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(ValueError, match=r"vectors\.npy: not a readable \.npy array"):
        MemoryBank.load(saved, embedder)


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
