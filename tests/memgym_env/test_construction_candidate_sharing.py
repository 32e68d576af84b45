"""Scoring G candidates of one session shares work across them (MemoryGym-v0's env-step cost):
real MiniLM embeddings. That a candidate's reward does not change is in test_construction_env."""

from __future__ import annotations

import pytest

from membuilder.llm.embedders import load_embedder
from membuilder.memory import MemoryBank
from membuilder.memory.ops import Add, Update, render_ops
from memgym_env.construction.scoring import apply_candidates
from memgym_env.conversation import Session


class CountingEmbedder:
    """The real MiniLM embedder, recording each batch it is asked to encode."""

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, texts):
        self.batches.append(list(texts))
        return self.inner.encode(texts)


@pytest.fixture(scope="module")
def minilm():
    return load_embedder("minilm")


def test_new_entries_of_all_candidates_are_embedded_in_one_batch(minilm):
    embedder = CountingEmbedder(minilm)
    snapshot = MemoryBank(embedder)
    snapshot.apply("semantic", render_ops("semantic", [Add("Luna: the user's cat | Details: grey tabby")]))
    embedder.batches.clear()
    session = Session("s1", "8 May 2023")
    cands = [{"semantic": render_ops("semantic", [Add(f"Fact {i}: the user likes colour {i}")]), "core": ""}
             for i in range(4)]
    cands.append({"semantic": render_ops("semantic", [Update("Luna: the user's cat | Details: grey tabby",
                                                             "Luna: the user's cat | Details: grey tabby, 3 years")])})
    forks, applied = apply_candidates(snapshot, session, cands + cands[:2])
    assert len(embedder.batches) == 1
    assert sorted(embedder.batches[0]) == sorted({f"Fact {i}: the user likes colour {i}" for i in range(4)}
                                                 | {"Luna: the user's cat | Details: grey tabby, 3 years"})
    assert [len(f) for f in forks] == [2, 2, 2, 2, 2, 2, 2]
    assert applied[4]["semantic"].added_ids and not applied[4]["semantic"].warnings  # the quote found its entry
    assert len(snapshot) == 1  # the snapshot is untouched


def test_candidates_with_the_same_entry_writes_read_one_store_with_their_own_core(minilm):
    snapshot = MemoryBank(minilm)
    session = Session("s1", "8 May 2023")
    semantic = render_ops("semantic", [Add("Max: the user's beagle | Details: adopted in March")])
    forks, _ = apply_candidates(snapshot, session, [
        {"core": '{"operation": "APPEND", "content": "Name: Caroline"}', "semantic": semantic},
        {"core": '{"operation": "APPEND", "content": "Name: Melanie"}', "semantic": semantic}])
    assert [f.core.text for f in forks] == ["Name: Caroline", "Name: Melanie"]
    assert forks[0].store is forks[1].store  # the shared write was applied once
    child = forks[0].fork()  # writing goes through a fork, so the sibling never sees it
    child.apply("semantic", render_ops("semantic", [Add("Rex: a second dog")]))
    assert len(child) == 2 and len(forks[1]) == 1
