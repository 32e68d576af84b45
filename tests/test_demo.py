"""`memgym demo` end to end on the smallest real run: SmolLM2 and MiniLM, two users, two periods."""

import json
from dataclasses import replace

import pytest

from memgym_env import demo
from memgym_env.demo_report import write_report

TINY = replace(demo.QUICK, users=2, eval_users=2, rollout_sessions=2, policy_sessions=1, policy_tokens=8)


@pytest.fixture(scope="module")
def models():
    from membuilder.llm import load_chat_model
    from membuilder.llm.embedders import load_embedder

    return load_chat_model("smollm2-135m"), load_embedder("minilm")


def test_demo_stages_write_a_report_with_plots(tmp_path, models):
    model, embedder = models
    with demo.Progress([model]) as progress:
        world = demo.make_world(TINY, tmp_path, seed=7)
        rollouts = demo.rollouts(world, TINY, model, progress)
        results = demo.interactive(world, TINY, model, embedder, "smollm2-135m", tmp_path, progress,
                                   assistants=("oracle",), workers=2)  # the two users in two processes
        calls = progress.calls()
    assert sorted(progress.worker_calls) == [0, 1] and all(progress.worker_calls.values())
    meta = {"model": "smollm2-135m", "embedder": "minilm", "preset": "test", "seed": 7, "sizes": demo.sizes_dict(TINY),
            "world": str(world), "cpus": 2, "load_average": [0, 0, 0], "model_calls": calls, "wall_s": 1.0}
    paths = write_report(tmp_path, meta, rollouts, results)

    assert calls > 0  # the MemBuilder policy and the upper bound really called SmolLM2
    assert rollouts["oracle"]["mean_reward"] > rollouts["empty"]["mean_reward"]
    assert rollouts["membuilder"]["sessions"] == 1
    report = json.loads(paths["report.json"].read_text())
    assert set(report["construction"]) == set(demo.POLICIES)
    assert len(report["interactive"]["oracle"]["per_period"]["memory_score"]) == TINY.periods
    md = paths["report.md"].read_text()
    assert "| oracle |" in md and "construction_reward.png" in md
    for key in ("memory score plot", "failures plot", "construction plot"):
        assert paths[key].stat().st_size > 1000


def test_demo_rejects_a_bad_threads_value_in_one_line(capsys):
    from memgym_env.cli import main

    assert main(["demo", "--threads", "0", "--out", "/tmp/memgym-demo-never"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "memgym demo: error: --threads must be at least 1"
