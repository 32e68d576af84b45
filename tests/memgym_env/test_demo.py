"""`memgym demo` end to end on the smallest real run: SmolLM2 and MiniLM, two users, two periods."""

import json
import os
from dataclasses import replace

import pytest

from memgym_env.demo import job as demo
from memgym_env.demo.report import write_report

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
        stages = progress.stage_seconds()
    assert sorted(progress.worker_calls) == [0, 1] and all(progress.worker_calls.values())
    # Where the time went, part by part; the interactive part's CPU includes its two joined worker processes.
    assert list(stages) == ["MemoryGym-v0", "interactive"]
    assert all(t["wall_s"] > 0 for t in stages.values()) and stages["interactive"]["cpu_s"] > 1
    meta = {"model": "smollm2-135m", "embedder": "minilm", "preset": "test", "seed": 7, "sizes": demo.sizes_dict(TINY),
            "world": str(world), "cpus": 2, "load_average": [0, 0, 0], "model_calls": calls, "wall_s": 1.0,
            "stages": stages}
    paths = write_report(tmp_path, meta, rollouts, results)

    assert calls > 0  # the MemBuilder policy and the upper bound really called SmolLM2
    assert rollouts["oracle"]["mean_reward"] > rollouts["empty"]["mean_reward"]
    assert rollouts["membuilder"]["sessions"] == 1
    report = json.loads(paths["report.json"].read_text())
    assert set(report["construction"]) == set(demo.POLICIES)
    assert len(report["interactive"]["oracle"]["per_period"]["memory_score"]) == TINY.periods
    md = paths["report.md"].read_text()
    assert "| oracle |" in md and "construction_reward.png" in md
    assert f"interactive {stages['interactive']['wall_s']:.0f} / {stages['interactive']['cpu_s']:.0f}" in md
    for key in ("memory score plot", "failures plot", "construction plot"):
        assert paths[key].stat().st_size > 1000


def test_demo_rejects_a_bad_threads_value_in_one_line(capsys):
    from memgym_env.cli import main

    assert main(["demo", "--threads", "0", "--out", "/tmp/memgym-demo-never"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "memgym demo: error: --threads must be at least 1"


def test_demo_report_shows_the_untrained_and_the_trained_constructor_side_by_side(tmp_path, models):
    from membuilder.llm import load_chat_model
    from membuilder.llm.registry import TRAINED_POLICY

    model, embedder = models
    sizes = replace(TINY, eval_users=1)
    # one torch thread (process-wide) on a 2-core machine shared with other jobs: several times faster
    trained = load_chat_model(TRAINED_POLICY, threads=1 if (os.cpu_count() or 1) <= 2 else None)
    with demo.Progress([model, trained]) as progress:
        world = demo.make_world(sizes, tmp_path, seed=7)
        # The constructors are compared in the policy's own setting: MemoryGym-v0 on the demo's world keeps
        # the oracle and the empty policy only.
        rollouts = demo.rollouts(world, sizes, None, progress)
        results = demo.interactive(world, sizes, model, embedder, "smollm2-135m", tmp_path, progress,
                                   assistants=("membuilder",), untrained="smollm2-135m",
                                   constructors={TRAINED_POLICY: trained})
    assert list(rollouts) == ["oracle", "empty"] and list(results) == ["membuilder", demo.UNTRAINED]
    assert results["membuilder"]["constructor"] == TRAINED_POLICY
    assert results[demo.UNTRAINED]["constructor"] == results[demo.UNTRAINED]["model"] == "smollm2-135m"
    assert results["membuilder"]["usage_by_stage"]["write"]["calls"] > 0  # the trained model's calls are booked
    meta = {"model": "smollm2-135m", "constructor": TRAINED_POLICY, "untrained_constructor": "smollm2-135m",
            "embedder": "minilm", "preset": "test", "seed": 7, "sizes": demo.sizes_dict(sizes), "world": str(world),
            "cpus": 2, "load_average": [0, 0, 0], "model_calls": progress.calls(), "wall_s": 1.0}
    built = {label: {"spec": spec, "n": 2, "mean_reward": 0.1, "ci": [0.0, 0.2], "grounding": {"entries": 0},
                     "valid_rate": dict.fromkeys(("core", "episodic", "semantic", "procedural"), 1.0)}
             for label, spec in (("untrained", "smollm2-135m"), ("trained", TRAINED_POLICY))}
    comparison = {"setting": demo.policy_setting(TRAINED_POLICY), "users": ["u"], "session_keys": ["u/a", "u/b"],
                  "max_new_tokens": 256, "max_prompt_tokens": 384, "constructors": built,
                  "noop": {"mean_reward": 0.0, "ci": [0.0, 0.0], "n": 2},
                  "oracle": {"mean_reward": 0.5, "ci": [0.4, 0.6], "n": 2},
                  "difference": {"mean": 0.0, "ci": [0.0, 0.0], "n": 2},
                  "verdict": "trained > untrained: not shown: trained - untrained +0.000"}
    paths = write_report(tmp_path, meta, rollouts, results, comparison)
    md = paths["report.md"].read_text()
    section = md.split("untrained vs trained", 1)[1].split("## Interactive", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| smollm2")]
    assert [r.split(" | ")[0] for r in rows] == ["| smollm2-135m (untrained)", f"| {TRAINED_POLICY} (trained)"]
    assert all("| 2 | 0.100 | [0.000, 0.200] |" in r and "| 2 (1 users) |" in r for r in rows)
    assert "**trained > untrained: not shown:" in section and "| no-op (writes nothing) | 2 | 0.000 |" in section
    report = json.loads(paths["report.json"].read_text())
    assert report["interactive"]["membuilder"]["constructor"] == TRAINED_POLICY
    assert report["constructors"]["difference"]["n"] == 2

    # Without the interactive untrained run the table keeps both constructors, with no interactive columns.
    only_trained = {k: v for k, v in results.items() if k != demo.UNTRAINED}
    md = write_report(tmp_path / "default", meta, rollouts, only_trained, comparison)["report.md"].read_text()
    section = md.split("untrained vs trained", 1)[1].split("## Interactive", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| smollm2")]
    assert len(rows) == 2 and "interactive cells" not in section and "--policy-model smollm2-135m" in section
    # Without a comparison (a model with no policy card) there is no such section.
    assert "untrained vs trained" not in write_report(tmp_path / "none", meta, rollouts, results)["report.md"].read_text()
    # Item 6 of the demo: MemBuilder with both constructors on the same users, in every preset that measures
    assert demo.DEFAULT.compare_interactive and demo.FULL.compare_interactive
    assert {"membuilder", "rag", "oracle"} <= set(demo.DEFAULT.assistants) and "awe" in demo.FULL.assistants


def test_the_demo_table_gives_questions_and_intervals_and_the_report_its_notes():
    from memgym_env.demo.report import interactive_table
    from memgym_env.interactive.results import notes

    r = {"assistant": "rag", "usage_by_stage": {"answer": {"calls": 3}},
         "policy_note": "the template simulator does not read the assistant's replies",
         "overall": {"accuracy": 0.5, "upper_bound": 0.6, "memory_score": 0.7, "write": 0.2, "read": 0.2,
                     "utilization": 0.1, "questions": 16, "accuracy_ci95": [0.28, 0.72], "memory_score_ci95": None}}
    head, row = interactive_table({"rag": r})
    assert head[1:4] == ["questions", "accuracy", "95% CI"] and row[1:4] == ["16", "0.500", "[0.28, 0.72]"]
    assert "note (rag): the template simulator does not read" in notes([r])
