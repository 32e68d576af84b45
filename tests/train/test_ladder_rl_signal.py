"""train.ladder.rl_signal: the learning-signal summary the ladder reads off an RL run's rollout log."""

from __future__ import annotations

import json

import pytest

from membuilder.memory.ops import AGENTS
from train.ladder.rl_signal import (
    dominant_shares,
    paired_line,
    paired_train_difference,
    rl_signal,
    signal_line,
)


def _log(folder, rewards_by_step, process=0, extra=()):
    """A rollout log as ADRPOTrainer writes it: one session a step, each agent's G rewards."""
    lines = []
    for step, by_agent in rewards_by_step.items():
        for agent, rewards in by_agent.items():
            for k, reward in enumerate(rewards):
                lines.append({"mode": "train", "step": step, "batch": 0, "process": process, "num_processes": 1,
                              "session_key": f"user/p0-s{step}", "agent": agent, "k": k, "completion": "{}",
                              "reward": reward, "weight": 1.0, "advantage": 0.0, "task_rewarded": True})
    lines += extra
    (folder / f"rollouts.{process}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_early_against_late_reward_and_the_prompts_that_gave_no_gradient(tmp_path):
    # steps 0-1: every rollout scores 0 (all 8 groups alike); steps 2-5: core's group splits, the rest alike;
    # steps 6-7: every group splits 1.0 / 0.5
    steps = {s: {a: [0.0, 0.0] for a in AGENTS} for s in (0, 1)}
    steps |= {s: {a: ([1.0, 0.0] if a == "core" else [0.25, 0.25]) for a in AGENTS} for s in (2, 3, 4, 5)}
    steps |= {s: {a: [1.0, 0.5] for a in AGENTS} for s in (6, 7)}
    evaluation = {"mode": "eval", "step": 3, "session_key": "held/p0-s0", "agent": "core", "reward": 1.0}
    _log(tmp_path, steps, extra=[evaluation])
    signal = rl_signal(tmp_path)
    assert signal["steps"] == 8 and signal["window"] == 2 and signal["agent_prompts"] == 32
    assert signal["first"] == {"mean": 0.0, "ci": [0.0, 0.0], "steps": 2}
    assert signal["last"] == {"mean": 0.75, "ci": [0.75, 0.75], "steps": 2}
    assert signal["per_agent"]["core"]["last"]["mean"] == 0.75
    # alike: all 8 groups of steps 0-1, the 12 non-core groups of steps 2-5
    assert signal["frac_prompts_alike"] == pytest.approx(20 / 32, abs=1e-4)
    assert signal["frac_prompts_alike_per_agent"] == {"core": 0.25, "episodic": 0.75, "semantic": 0.75,
                                                      "procedural": 0.75}
    line = signal_line("adrpo", 0, signal)
    assert "the first 2 of 8 steps" in line and "(up)" in line and "62% of 32 agent prompts" in line  # 0.625, rounded half to even

    # a run stopped at the checkpoint of step 4 is summarised on the rollouts of its first 4 updates
    stopped = rl_signal(tmp_path, until=4)
    assert stopped["steps"] == 4 and stopped["window"] == 1 and stopped["last"]["mean"] == pytest.approx(0.3125)


def test_every_process_log_counts_and_no_log_means_no_summary(tmp_path):
    assert rl_signal(tmp_path) is None
    _log(tmp_path, {0: {a: [1.0, 0.0] for a in AGENTS}}, process=0)
    _log(tmp_path, {0: {a: [0.0, 0.0] for a in AGENTS}}, process=1)
    # the two processes' logs name the same session key here, so their groups pool: none is alike
    assert rl_signal(tmp_path)["agent_prompts"] == 4 and rl_signal(tmp_path)["first"]["mean"] == 0.25


def test_a_damaged_rollout_log_is_named_with_its_line(tmp_path):
    _log(tmp_path, {0: {a: [1.0] for a in AGENTS}}, extra=[{"mode": "train", "step": 1, "agent": "core"}])
    with pytest.raises(ValueError, match=r"rollouts\.0\.jsonl: line 5 .*session_key"):
        rl_signal(tmp_path)


def test_two_runs_are_compared_step_by_step_where_they_drew_the_same_sessions(tmp_path):
    adrpo, grpo = tmp_path / "adrpo", tmp_path / "grpo"
    adrpo.mkdir()
    grpo.mkdir()
    _log(adrpo, {s: {a: [0.25 * (s % 3), 0.0] for a in AGENTS} for s in range(8)})
    _log(grpo, {s: {a: [0.25 * (s % 3) + 0.5, 0.0] for a in AGENTS} for s in range(8)})
    d = paired_train_difference(adrpo, grpo)
    # each step's mean is (x + 0) / 2, so GRPO's is 0.25 higher at every step whatever the session's level
    assert d["steps"] == 8 and d["mean"] == pytest.approx(0.25) and d["ci"] == [0.25, 0.25]
    assert d["last_steps"] == 2 and d["last_mean"] == pytest.approx(0.25)
    assert d["per_step"][0] == {"step": 1, "difference": 0.25} and len(d["per_step"]) == 8  # by update, as curves
    assert "+0.250 [0.250, 0.250] (above) over 8 steps" in paired_line("GRPO seed 0", "ADRPO seed 0", d)
    assert paired_train_difference(adrpo, grpo, until=3)["steps"] == 3
    # a step whose sessions differ between the runs is not a pair
    (grpo / "rollouts.0.jsonl").write_text((grpo / "rollouts.0.jsonl").read_text().replace("p0-s5", "p1-s5"))
    assert paired_train_difference(adrpo, grpo)["steps"] == 7


def test_the_dominant_memory_type_comes_from_the_runs_logged_metrics(tmp_path):
    def entry(step, semantic):
        return {"step": step, "adrpo/dominant_episodic": 1.0 - semantic, "adrpo/dominant_semantic": semantic,
                "adrpo/dominant_procedural": 0.0, "adrpo/dominant_none": 0.0}

    assert dominant_shares(tmp_path) is None
    # a run stopped part-way: its last checkpoint's trainer state holds the log
    for step, history in ((2, [entry(1, 1.0), entry(2, 0.5)]), (10, [entry(1, 1.0), entry(2, 0.5), entry(3, 0.0)])):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    assert dominant_shares(tmp_path)["semantic"] == 0.5  # checkpoint-10, not the lexically last checkpoint-2
    assert dominant_shares(tmp_path, until=2)["semantic"] == 0.75
    # a finished run: its log_history.json, with the trainer's closing summary that has no such metric
    (tmp_path / "log_history.json").write_text(json.dumps([entry(1, 1.0), {"step": 1, "train_loss": 0.1}]))
    assert dominant_shares(tmp_path) == {"episodic": 0.0, "semantic": 1.0, "procedural": 0.0, "none": 0.0}
    _log(tmp_path, {0: {a: [1.0, 0.0] for a in AGENTS}})
    assert "Dominant memory type (ADRPO's alpha goes to its agent): semantic 100%" in signal_line(
        "adrpo", 0, rl_signal(tmp_path))


def test_a_packed_log_reads_as_the_plain_one_and_packs_to_the_same_bytes(tmp_path):
    """A committed ladder work folder keeps only the gzip copies of a finished run's rollout logs: the
    report read from them says what it said from the plain logs."""
    from train.ladder.policy_actions import rollout_actions
    from train.ladder.rl_signal import pack_rollouts, read_rollouts, rollout_logs

    _log(tmp_path, {s: {a: [1.0, 0.5 * (s % 2)] for a in AGENTS} for s in range(6)}, process=0)
    _log(tmp_path, {s: {a: [0.25, 0.0] for a in AGENTS} for s in range(6)}, process=1)
    plain_records, plain_signal = read_rollouts(tmp_path), rl_signal(tmp_path)
    plain_actions = rollout_actions(tmp_path)
    packed = pack_rollouts(tmp_path)
    assert [p.name for p in packed] == ["rollouts.0.jsonl.gz", "rollouts.1.jsonl.gz"]
    first_bytes = packed[0].read_bytes()
    assert [p.name for p in rollout_logs(tmp_path)] == ["rollouts.0.jsonl", "rollouts.1.jsonl"]  # plain ones first
    assert read_rollouts(tmp_path) == plain_records  # not read twice

    for p in tmp_path.glob("rollouts.*.jsonl"):
        p.unlink()
    assert [p.name for p in rollout_logs(tmp_path)] == ["rollouts.0.jsonl.gz", "rollouts.1.jsonl.gz"]
    assert read_rollouts(tmp_path) == plain_records
    assert rl_signal(tmp_path) == plain_signal and rollout_actions(tmp_path) == plain_actions
    assert pack_rollouts(tmp_path) == []  # no plain log left to pack; the copies stay
    assert packed[0].read_bytes() == first_bytes

    _log(tmp_path, {s: {a: [1.0, 0.5 * (s % 2)] for a in AGENTS} for s in range(6)}, process=0)
    pack_rollouts(tmp_path)
    assert packed[0].read_bytes() == first_bytes  # the same log packs to the same bytes
