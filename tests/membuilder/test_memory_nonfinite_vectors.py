"""A non-finite vector is refused where it is written, so every bank that saves also loads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from membuilder.memory import EmbeddingCache, Entry, MemoryBank, VectorStore


class FailingEmbedder:
    """The real MiniLM, except that it returns NaN for texts holding "\u2603" (an embedder that fails on one input)."""

    def __init__(self, inner):
        self.inner, self.name, self.dim, self.max_chars = inner, "minilm-nan", inner.dim, inner.max_chars

    def encode(self, texts):
        out = np.array(self.inner.encode(texts), dtype=np.float32)
        out[["\u2603" in t for t in texts]] = np.nan
        return out


def test_store_refuses_nan_and_inf_naming_the_entry():
    store = VectorStore(EmbeddingCache(dim=4))
    good = np.eye(4, dtype=np.float32)[:2]
    bad = good.copy()
    bad[1, 0] = np.inf
    with pytest.raises(ValueError, match="entry 'b'.*not finite"):
        store.add([Entry("a", "semantic", "x"), Entry("b", "semantic", "y")], bad)
    assert len(store) == 0  # nothing of the batch was written
    with pytest.raises(ValueError, match="entry 'b'"):
        store.extend_sealed([Entry("a", "semantic", "x"), Entry("b", "semantic", "y")], bad)
    store.add([Entry("a", "semantic", "x"), Entry("b", "semantic", "y")], good)
    assert len(store) == 2


def test_a_bank_whose_embedder_fails_logs_the_lost_write_and_still_saves_and_loads(embedder, tmp_path):
    bank = MemoryBank(FailingEmbedder(embedder))
    done = bank.apply("semantic", json.dumps({"operations": [{"action": "ADD", "memory": "Coffee: pour-over"},
                                                             {"action": "ADD", "memory": "Snow \u2603 day"}]}))
    assert done.valid and len(done.added_ids) == 1
    assert any("non-finite" in w for w in done.warnings)
    bank.save(tmp_path / "bank")
    again = MemoryBank.load(tmp_path / "bank", FailingEmbedder(embedder))
    assert [e.text for e in again.entries()] == ["Coffee: pour-over"]
