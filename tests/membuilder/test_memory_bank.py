"""The memory bank with the real MiniLM embedder and real FAISS (protocols §1)."""

from __future__ import annotations

import json

import pytest
from fuzz_corpus import corpus

from membuilder.memory import CORE_LIMIT, MemoryBank
from membuilder.memory.ops import AGENTS, Add, Merge, Update, parse, render_ops


def ops_json(*ops: dict) -> str:
    return json.dumps({"operations": list(ops)})


@pytest.fixture
def bank(embedder):
    return MemoryBank(embedder)


# ---- Core -------------------------------------------------------------------------------
def test_core_append_replace_rewrite(bank):
    bank.apply("core", '{"operation": "APPEND", "content": "Name: Caroline"}')
    bank.apply("core", '{"operation": "APPEND", "content": "Pet: none"}')
    assert bank.core.text == "Name: Caroline\nPet: none"
    bank.apply("core", '{"operation": "REPLACE", "old_text": "Pet: none", "new_text": "Pet: Luna (cat)"}')
    assert bank.core.text == "Name: Caroline\nPet: Luna (cat)"
    bank.apply("core", '{"operation": "REWRITE", "content": "Caroline, owns a cat named Luna."}')
    assert bank.core.text == "Caroline, owns a cat named Luna."
    assert bank.core.usage == pytest.approx(100 * len(bank.core.text) / CORE_LIMIT)


def test_core_replace_of_absent_text_changes_nothing_and_says_so(bank):
    bank.apply("core", '{"operation": "APPEND", "content": "Lives in Boston"}')
    applied = bank.apply("core", '{"operation": "REPLACE", "old_text": "Lives in Paris", "new_text": "x"}')
    assert applied.valid  # well-formed output: the gate passes, the edit is a no-op
    assert bank.core.text == "Lives in Boston"
    assert [e.kind for e in applied.core_events] == ["replace_missing"]
    assert "not found" in applied.warnings[0]
    assert (applied.quoted, applied.quoted_missing) == (1, 1)  # the edit a change needed did not happen
    found = bank.apply("core", '{"operation": "REPLACE", "old_text": "Boston", "new_text": "Lisbon"}')
    assert (found.quoted, found.quoted_missing) == (1, 0) and bank.core.text == "Lives in Lisbon"


def test_core_rewrite_over_the_limit_calls_the_compressor(embedder):
    calls = []

    def squeeze(text: str, target: int) -> str:
        calls.append((len(text), target))
        return text[:target]  # a compressor that meets its target

    bank = MemoryBank(embedder, compressor=squeeze)
    applied = bank.apply("core", json.dumps({"operation": "REWRITE", "content": "a" * 6000}))
    assert calls == [(6000, 3000)]
    assert len(bank.core.text) == 3000
    assert [e.kind for e in applied.core_events] == ["compressed"]


def test_core_over_the_limit_is_truncated_as_last_resort(embedder):
    bank = MemoryBank(embedder, compressor=lambda text, target: text + " and more")  # fails to shrink
    applied = bank.apply("core", json.dumps({"operation": "REWRITE", "content": "b" * 7000}))
    assert len(bank.core.text) == CORE_LIMIT
    assert [e.kind for e in applied.core_events] == ["compressed", "truncated"]
    no_hook = MemoryBank(embedder)
    no_hook.apply("core", json.dumps({"operation": "REWRITE", "content": "c" * 5001}))
    assert len(no_hook.core.text) == CORE_LIMIT and no_hook.core.events[-1].kind == "truncated"


def test_core_compressor_that_raises_does_not_lose_the_block(embedder):
    def broken(text, target):
        raise TimeoutError("model server down")

    bank = MemoryBank(embedder, compressor=broken)
    applied = bank.apply("core", json.dumps({"operation": "REWRITE", "content": "d" * 5200}))
    assert [e.kind for e in applied.core_events] == ["compress_failed", "truncated"]
    assert bank.core.text == "d" * CORE_LIMIT


# ---- Episodic, Semantic, Procedural ------------------------------------------------------
def test_add_writes_typed_entries_with_time_and_session(bank):
    applied = bank.apply("episodic", ops_json({"action": "ADD", "memory": "2023-05-07: went to a support group | Details: inspiring"}),
                         time="8 May 2023", session="session_1")
    (entry_id,) = applied.added_ids
    entry = bank.get(entry_id)
    assert entry.type == "episodic" and entry.time == "8 May 2023" and entry.session == "session_1"


def test_update_adds_a_new_version_linked_to_its_predecessor(bank):
    old = "Diet: vegetarian | Details: since 2020"
    (first,) = bank.apply("semantic", ops_json({"action": "ADD", "memory": old})).added_ids
    applied = bank.apply("semantic", ops_json({"action": "UPDATE", "old_memory": old, "new_memory": "Diet: vegan | Details: since 2023"}))
    (second,) = applied.added_ids
    assert bank.get(second).predecessors == (first,)
    assert bank.get(first) is not None  # nothing is deleted: history stays searchable
    assert len(bank) == 2
    assert (applied.quoted, applied.quoted_missing) == (1, 0)


def test_update_quoting_with_different_spacing_and_case_finds_the_entry(bank):
    (first,) = bank.apply("procedural", ops_json({"action": "ADD", "memory": "Morning run | Steps: 1. stretch 2. run 5 km"})).added_ids
    applied = bank.apply("procedural", ops_json({"action": "UPDATE", "old_memory": "morning run |  steps: 1. stretch 2. run 5 km",
                                                 "new_memory": "Morning run | Steps: 1. stretch 2. run 8 km"}))
    assert bank.get(applied.added_ids[0]).predecessors == (first,)
    assert not applied.warnings


def test_update_of_missing_memory_is_applied_as_new_entry_with_warning(bank):
    applied = bank.apply("semantic", ops_json({"action": "UPDATE", "old_memory": "Job: accountant at a bank",
                                               "new_memory": "Job: teacher at a primary school"}))
    assert applied.valid
    (new,) = applied.added_ids
    assert bank.get(new).predecessors == ()
    assert "no semantic memory matches" in applied.warnings[0]
    assert (applied.quoted, applied.quoted_missing) == (1, 1)


def test_merge_of_three_entries_keeps_evidence_and_time_range(bank):
    texts = [
        "2023-05-01: started pottery class | Details: Mondays",
        "2023-05-08: made a bowl in pottery class | Details: blue glaze",
        "2023-05-15: pottery class exhibition | Details: sold the bowl",
    ]
    ids = []
    for day, text in zip(["1 May 2023", "8 May 2023", "15 May 2023"], texts):
        ids += bank.apply("episodic", ops_json({"action": "ADD", "memory": text}), time=day).added_ids
    applied = bank.apply("episodic", ops_json({"action": "MERGE", "old_memories": texts,
                                               "new_memory": "May 2023: pottery class from start to exhibition | Details: bowl sold"}),
                         time="20 May 2023")
    merged = bank.get(applied.added_ids[0])
    assert merged.evidence == tuple(ids) and merged.predecessors == tuple(ids)
    assert merged.time_range == ("1 May 2023", "20 May 2023")
    assert len(bank) == 4
    assert (applied.quoted, applied.quoted_missing) == (3, 0)


def test_skip_writes_nothing(bank):
    applied = bank.apply("semantic", ops_json({"action": "SKIP", "reason": "Paris is the capital of France"}))
    assert applied.valid and applied.added_ids == [] and len(bank) == 0


def test_invalid_output_changes_nothing(bank):
    applied = bank.apply("episodic", ops_json({"action": "ADD", "memory": "fine"}, {"action": "DELETE", "memory": "x"}))
    assert not applied.valid and applied.added_ids == [] and len(bank) == 0


# ---- retrieval ---------------------------------------------------------------------------
def test_retrieve_ranks_by_meaning_and_filters_by_type(bank):
    bank.apply("semantic", ops_json({"action": "ADD", "memory": "Luna: the user's cat | Details: grey tabby"}))
    bank.apply("episodic", ops_json({"action": "ADD", "memory": "2023-06-01: flew to Lisbon for a conference"}))
    bank.apply("procedural", ops_json({"action": "ADD", "memory": "Feeding the cat | Steps: 1. wet food at 7 2. dry food at 19"}))
    hits = bank.retrieve("What is the name of my pet cat?", k=10)
    assert hits[0].entry.text.startswith("Luna") and hits[0].type == "semantic"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert {h.type for h in bank.retrieve("cat", k=10, types=["procedural"])} == {"procedural"}
    assert [h.type for h in bank.view("episodic", "travel")] == ["episodic"]


# ---- forks -------------------------------------------------------------------------------
def test_fork_writes_are_invisible_to_parent_and_siblings(bank):
    bank.apply("semantic", ops_json({"action": "ADD", "memory": "Shared fact: likes jazz"}))
    bank.apply("core", '{"operation": "APPEND", "content": "base"}')
    a, b = bank.fork(), bank.fork()
    a.apply("semantic", ops_json({"action": "ADD", "memory": "Only in fork A: plays violin"}))
    a.apply("core", '{"operation": "APPEND", "content": "from A"}')
    b.apply("episodic", ops_json({"action": "ADD", "memory": "Only in fork B: moved house"}))
    assert len(bank) == 1 and len(a) == 2 and len(b) == 2
    assert bank.core.text == "base" and b.core.text == "base" and a.core.text == "base\nfrom A"
    assert all("fork" not in h.entry.text for h in bank.retrieve("violin house", k=10))
    assert all("fork B" not in h.entry.text for h in a.retrieve("moved house", k=10))
    # Later writes to the parent do not leak into existing forks either.
    bank.apply("semantic", ops_json({"action": "ADD", "memory": "Parent-only fact: owns a bike"}))
    assert all("bike" not in h.entry.text for h in a.retrieve("bike", k=10))


def test_forks_share_the_embedding_cache(bank):
    fork_a, fork_b = bank.fork(), bank.fork()
    fork_a.apply("semantic", ops_json({"action": "ADD", "memory": "Tea: prefers oolong"}))
    misses = bank.cache.misses
    fork_b.apply("semantic", ops_json({"action": "ADD", "memory": "Tea: prefers oolong"}))
    assert bank.cache.misses == misses  # the sibling's identical write was not embedded again


# ---- files -------------------------------------------------------------------------------
QUERIES = ["pets", "travel plans", "how to make coffee", "family", "work", "a quiet evening"]


def _fill(bank, n: int = 40):
    for i in range(n):
        mtype = ("episodic", "semantic", "procedural")[i % 3]
        bank.apply(mtype, ops_json({"action": "ADD", "memory": f"Item {i}: {['cat', 'trip', 'coffee', 'sister', 'office'][i % 5]} note {i}"}),
                   time=f"2023-05-{1 + i % 28:02d}", session=f"s{i // 5}")
    bank.apply("core", '{"operation": "APPEND", "content": "Name: Ana; lives in Porto"}')


def test_save_load_round_trip_retrieves_identically(bank, embedder, tmp_path):
    _fill(bank)
    fork = bank.fork()  # a chain of several segments plus a tail
    fork.apply("semantic", ops_json({"action": "ADD", "memory": "Late fact: adopted a dog"}))
    fork.save(tmp_path / "bank")
    loaded = MemoryBank.load(tmp_path / "bank", embedder)
    assert loaded.core.text == fork.core.text
    assert [e.to_dict() for e in loaded.entries()] == [e.to_dict() for e in fork.entries()]
    for q in QUERIES:
        assert [(h.id, h.score) for h in loaded.retrieve(q, k=10)] == [(h.id, h.score) for h in fork.retrieve(q, k=10)]
    # A loaded bank keeps numbering where the saved one stopped.
    new = loaded.apply("semantic", ops_json({"action": "ADD", "memory": "Another"})).added_ids[0]
    assert loaded.get(new).id not in {e.id for e in fork.entries()}


def test_save_replaces_previous_save_and_leaves_no_temporary_folders(bank, embedder, tmp_path):
    _fill(bank, 6)
    bank.save(tmp_path / "bank")
    _fill(bank, 3)
    bank.save(tmp_path / "bank")
    assert len(MemoryBank.load(tmp_path / "bank", embedder)) == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bank"]


def test_loading_a_damaged_bank_names_the_file_and_field(bank, embedder, tmp_path):
    _fill(bank, 3)
    path = bank.save(tmp_path / "bank")
    meta = json.loads((path / "bank.json").read_text())
    meta.pop("checksums")  # edited by hand: the field check behind the checksum is what is tested
    meta["entries"][1]["text"] = None
    (path / "bank.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"bank\.json: entries\[1\]: field 'text'"):
        MemoryBank.load(path, embedder)
    with pytest.raises(FileNotFoundError, match="no memory bank"):
        MemoryBank.load(tmp_path / "nowhere", embedder)


# ---- fuzz: apply never raises -------------------------------------------------------------
@pytest.mark.parametrize("agent", AGENTS)
def test_apply_never_raises_on_10k_mutated_outputs(agent, embedder):
    bank = MemoryBank(embedder)
    seeded = {"core": [], "episodic": [Add(t) for t in ("x", "y")], "semantic": [Add("z")], "procedural": [Add("w")]}[agent]
    if seeded:
        bank.apply(agent, render_ops(agent, seeded))
    texts = corpus(agent, seed=1)
    # Embed everything the corpus writes or quotes in one batch up front (the same real model and
    # cache that apply uses): one-at-a-time encoding would dominate the test's run time.
    quoted = [q for p in map(lambda t: parse(agent, t), texts) if p.valid for op in p.ops
              for q in ([getattr(op, "memory", None), getattr(op, "new_memory", None), getattr(op, "old_memory", None)]
                        + list(getattr(op, "old_memories", ()))) if q]
    bank.cache.embed(sorted(set(quoted)))
    valid = 0
    for text in texts:
        applied = bank.apply(agent, text, time="2023-05-08")
        valid += applied.valid
        assert len(bank.core.text) <= CORE_LIMIT
    assert valid > 500
    bank.retrieve("anything at all", k=10)


def test_merge_and_update_ops_round_trip_through_render(bank):
    bank.apply("episodic", render_ops("episodic", [Add("a1"), Add("a2")]))
    applied = bank.apply("episodic", render_ops("episodic", [Update("a1", "a1b"), Merge(("a1b", "a2"), "all")]))
    merged = bank.get(applied.added_ids[1])
    assert len(merged.evidence) == 2
