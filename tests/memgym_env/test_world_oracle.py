"""The oracle expert: its outputs parse, and a bank built from them recalls every current value."""

import pytest
from test_world_data_json import EXAMPLE

from membuilder.memory.ops import CoreAppend, CoreReplace, Update, parse
from memgym_env.world.config import WorldConfig
from memgym_env.world.data_json import read_world
from memgym_env.world.offline import generate_world
from memgym_env.world.oracle import expert_steps, variable_info

SMALL = WorldConfig(num_users=2, num_periods=3, num_questions=6)


@pytest.fixture(scope="module")
def world():
    return generate_world(SMALL)


def test_every_output_passes_the_parser(world):
    for user in world:
        for step in expert_steps(user):
            for agent, text in step.outputs.items():
                parsed = parse(agent, text)
                assert parsed.valid, (step.session_id, agent, parsed.errors)
                assert parsed.ops == step.ops[agent]


def test_entry_formats_follow_the_protocol(world):
    steps = expert_steps(world[0])
    change = next(s for s in steps if s.period == 1)
    (sem,) = change.ops["semantic"]
    assert isinstance(sem, Update) and " | Details: " in sem.new_memory
    (epi,) = change.ops["episodic"]
    assert epi.memory.startswith(change.session_time[:10] + ": ") and " | Details: " in epi.memory
    assert isinstance(change.ops["core"][0], CoreReplace)
    assert isinstance(steps[0].ops["core"][0], CoreAppend)
    assert steps[0].ops["episodic"] == []  # period 0 has no life events
    procedural = [op for s in steps for op in s.ops["procedural"]]
    for op in procedural:
        text = getattr(op, "memory", None) or op.new_memory
        assert " | Steps: 1. " in text and " | Context: " in text


def test_routine_variables_get_procedural_memory(world):
    for user in world:
        routines = {v for v, i in user.variable_info.items() if i.kind == "routine"}
        written = {v for s in expert_steps(user) for v in s.revealed if s.ops["procedural"]}
        assert routines <= written | set()  # every routine revealed is written as a procedure
        assert all(i.steps for v, i in user.variable_info.items() if v in routines)


def test_core_tracks_the_current_state(world):
    user = world[0]
    steps = expert_steps(user)
    core = steps[-1].core_after
    assert len(core) <= 5000
    for var, value in user.periods[-1].state.items():
        info = variable_info(user, var)
        assert f"{info.title}: {info.text(value)} (since " in core


def test_example_world_gets_catalog_knowledge():
    user = read_world(EXAMPLE)[0]
    steps = expert_steps(user)
    assert steps[0].ops["semantic"][0].memory.startswith("Diet: eats everything")
    pour_over = [s for s in steps if s.revealed.get("coffee_brewing_method") == "pour_over"][0]
    assert isinstance(pour_over.ops["procedural"][0], Update)


@pytest.mark.slow
def test_bank_built_from_the_expert_recalls_every_current_value(world, embedder):
    """For a question about each variable, the current value is in the top 10 (real MiniLM + FAISS)."""
    from membuilder.memory import MemoryBank

    for user in world:
        bank = MemoryBank(embedder)
        steps = expert_steps(user)
        texts = [t for s in steps for a in ("episodic", "semantic", "procedural")
                 for op in s.ops[a] for t in [getattr(op, "memory", None) or op.new_memory]]
        bank.cache.embed(texts)  # one batch instead of one encoder call per session
        for step in steps:
            for agent, text in step.outputs.items():
                assert bank.apply(agent, text, time=step.session_time, session=step.session_id).valid
        assert bank.core.text == steps[-1].core_after
        state = user.periods[-1].state
        questions = [variable_info(user, v).question() for v in state]
        for (var, value), hits in zip(state.items(), bank.retrieve_many(questions, k=10), strict=True):
            info = variable_info(user, var)
            want = f"{info.title}: {info.text(value)} |"
            assert any(h.entry.text.startswith(want) for h in hits), (user.id, var, [h.entry.text[:50] for h in hits])
