"""``memgym evaluate --workers``: users split over processes give the serial run's results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memgym_env.interactive.run_files import period_dir
from memgym_env.interactive.runner import RunConfig, evaluate_one
from memgym_env.interactive.workers import evaluate_parallel
from memgym_env.world import WorldConfig, generate_world, write_world

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_users(tmp_path_factory):
    world = generate_world(WorldConfig(num_users=2, num_periods=1, num_questions=1, changes_per_period=1,
                                       changes_jitter=0))
    path = tmp_path_factory.mktemp("world") / "world.json"
    write_world(world, path)
    return world, path


def cfg(path, out, assistant, **kw):
    settings = dict(reply_tokens=4, write_tokens=16, context_tokens=256, factual_recall=False) | kw
    return RunConfig(world=str(path), assistant=assistant, out=str(out), **settings)


def recorded(run: Path, world) -> list:
    out = []
    for user in world:
        for p in range(len(user.periods)):
            folder = period_dir(run, user.id, p)
            ev = json.loads((folder / "evaluation.json").read_text())
            ev.pop("usage"), ev.pop("wall_s")  # timing differs between runs; nothing else may
            out.append((json.loads((folder / "interactions.json").read_text()), ev))
    return out


def test_two_workers_reproduce_the_serial_run(two_users, tmp_path):
    import torch

    from tests.llm_models import smollm2

    world, path = two_users
    names = ("native", "oracle")
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers run one thread each; same arithmetic, same greedy choices
    try:
        model, cache = smollm2(), {}
        serial = [evaluate_one(cfg(path, tmp_path / "serial" / n, n), world, model, None, cache) for n in names]
    finally:
        torch.set_num_threads(before)
    parallel = evaluate_parallel([cfg(path, tmp_path / "parallel" / n, n) for n in names], workers=2, threads=1)
    for name, s, p in zip(names, serial, parallel, strict=True):
        assert recorded(tmp_path / "parallel" / name, world) == recorded(tmp_path / "serial" / name, world)
        assert json.dumps(p["overall"]) == json.dumps(s["overall"])
        assert p["workers"] == 2 and p["wall_s"] > 0
    # Everything is played: a second call starts no worker and returns the same results.
    again = evaluate_parallel([cfg(path, tmp_path / "parallel" / n, n) for n in names], workers=2, threads=1)
    assert json.dumps([a["overall"] for a in again]) == json.dumps([p["overall"] for p in parallel])  # NaN-safe


def test_a_failing_worker_is_reported_with_its_users(two_users, tmp_path):
    _, path = two_users
    with pytest.raises(RuntimeError, match=r"(?s)2 of 2 evaluation workers failed.*no-such-model"):
        evaluate_parallel([cfg(path, tmp_path / "bad", "native", model="no-such-model")], workers=2, threads=1)


def test_runs_with_different_models_are_refused(two_users, tmp_path):
    _, path = two_users
    with pytest.raises(ValueError, match="one world, model"):
        evaluate_parallel([cfg(path, tmp_path / "a", "native"), cfg(path, tmp_path / "b", "rag", model="other")], 2)
