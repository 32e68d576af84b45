"""One memory view for every writer: the interactive assistant, `memgym eval`'s MemBuilder and the grounding
check on real dialogue show the four agents the observation MemoryGym-v0 trains them on
(``build_observation``), so a trained policy is evaluated on the prompts it learned from."""

from __future__ import annotations

import ast
from pathlib import Path

from membuilder.agents.constructor import build_observation
from membuilder.memory import MemoryBank

ROOT = Path(__file__).resolve().parents[2]
WRITERS = ("membuilder/agents/membuilder_assistant.py", "memgym_env/benchmarks/systems.py",
           "memgym_env/benchmarks/grounding.py", "memgym_env/construction/env.py", "train/common.py")


def _calls(path: Path) -> set[str]:
    """The functions ``path`` calls, by name; a method of a memory bank as ``bank.<name>``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                names.add(f.id)
            elif isinstance(f, ast.Attribute):
                names.add(f"bank.{f.attr}" if ast.unparse(f.value).endswith("bank") else f.attr)
    return names


def test_every_writer_builds_its_observation_in_one_place():
    for rel in WRITERS:
        assert "build_observation" in _calls(ROOT / rel), f"{rel} writes memory without build_observation"
    # nothing outside the memory bank ranks an agent's view by its own query
    for path in sorted((ROOT / "membuilder").rglob("*.py")) + sorted((ROOT / "memgym_env").rglob("*.py")) + \
            sorted((ROOT / "train").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("membuilder/memory/") or rel == "membuilder/agents/constructor.py":
            continue
        assert not {"bank.view", "bank.session_view"} & _calls(path), f"{rel} ranks a memory view of its own"


def test_a_short_turn_finds_its_entry_beside_long_talk_of_something_else(embedder):
    """Each line of the session is a query: the one turn about the dog brings the dog's entry to the top of a
    view of 3, though the session is mostly about cooking and the bank holds eight cooking entries. The session
    as one query (what the interactive writer and `memgym eval` used before) ranks it last of nine."""
    bank = MemoryBank(embedder)
    for dish in ("risotto", "lasagne", "paella", "curry", "ramen", "goulash", "tagine", "moussaka"):
        bank.apply("semantic", f'{{"operations": [{{"action": "ADD", "memory": "Ana cooks {dish} on weekends"}}]}}')
    bank.apply("semantic", '{"operations": [{"action": "ADD", "memory": "Ana has a beagle named Max"}]}')
    talk = ["user: I spent the weekend in the kitchen again, slow simmered sauce, fresh herbs and a lot of garlic."] * 8
    session = "\n".join([*talk[:4], "user: Max the beagle is limping.", *talk[4:]])
    view = build_observation(bank, session, "1 May 2023", view_k=3)["semantic"]
    assert len(view) == 3 and view[0] == "Ana has a beagle named Max"
    assert [h.entry.text for h in bank.view("semantic", session, 9)][-1] == "Ana has a beagle named Max"


def test_live_only_view_keeps_the_current_version_in_a_slot_the_old_one_took(embedder):
    """An UPDATEd fact in a view of one slot: the whole history ranks the old version first (the session
    repeats its words), so the writer would copy it; the live view gives the slot to the current entry."""
    bank = MemoryBank(embedder)
    old, new = "Exercise type: yoga on a mat", "Exercise type: outdoor running in the park"
    bank.apply("semantic", f'{{"operations": [{{"action": "ADD", "memory": "{old}"}}]}}')
    bank.apply("semantic", f'{{"operations": [{{"action": "UPDATE", "old_memory": "{old}", "new_memory": "{new}"}}]}}')
    session = "user: I used to do yoga on a mat as my exercise type."
    assert build_observation(bank, session, "1 May 2023", view_k=1)["semantic"] == (old,)
    assert build_observation(bank, session, "1 May 2023", view_k=1, live_only=True)["semantic"] == (new,)
    assert set(build_observation(bank, session, "1 May 2023", view_k=2)["semantic"]) == {old, new}
