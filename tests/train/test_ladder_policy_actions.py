"""train.ladder.policy_actions: what kind of memory operation each stage's outputs choose, held-out and in RL rollouts."""

from __future__ import annotations

import json

import pytest

from membuilder.memory.ops import AGENTS
from train.ladder.inspect_run import main as inspect_main
from train.ladder.policy_actions import (
    LEGEND_HANDLE,
    SEED_LINES,
    edits_against_expert,
    gap_line,
    held_out_actions,
    held_out_line,
    kind,
    plot_actions,
    push_line,
    rollout_actions,
    rollout_line,
    seed_line,
)

APPEND = '{"operation": "APPEND", "content": "Home city: Lisbon (since 2021-03-02)"}'
REPLACE = '{"operation": "REPLACE", "old_text": "Home city: Porto", "new_text": "Home city: Lisbon"}'
ADD = '{"operations": [{"action": "ADD", "memory": "Moved to Lisbon for a new job"}]}'
UPDATE = '{"operations": [{"action": "UPDATE", "old_memory": "Lives in Porto", "new_memory": "Lives in Lisbon"}]}'
ADD_AND_UPDATE = ('{"operations": [{"action": "ADD", "memory": "Cycles to work"}, '
                  '{"action": "UPDATE", "old_memory": "Lives in Porto", "new_memory": "Lives in Lisbon"}]}')
SKIP = '{"operations": [{"action": "SKIP", "reason": "small talk"}]}'


@pytest.mark.parametrize(("agent", "text", "expected"), [
    ("core", APPEND, "new"), ("core", REPLACE, "edit"),
    ("core", '{"operation": "REWRITE", "content": "Name: Ana"}', "edit"),
    ("semantic", ADD, "new"), ("semantic", UPDATE, "edit"),
    ("semantic", ADD_AND_UPDATE, "edit"),  # it quotes memory, so it can miss
    ("semantic", SKIP, "nothing"), ("episodic", '{"operations": []}', "nothing"),
    ("procedural", SKIP, "invalid"),  # SKIP is Semantic's alone
    ("core", ADD, "invalid"), ("episodic", '{"operations": [{"action": "ADD"', "invalid"), ("core", None, "invalid"),
])
def test_each_output_falls_in_one_kind(agent, text, expected):
    assert kind(agent, text) == expected


def test_held_out_outputs_by_kind_per_agent():
    outputs = {"u/p0-s0": {"core": APPEND, "episodic": ADD, "semantic": UPDATE, "procedural": ADD},
               "u/p0-s1": {"core": REPLACE, "episodic": ADD, "semantic": ADD_AND_UPDATE, "procedural": "{"},
               "u/p0-s2": {"core": APPEND, "episodic": '{"operations": []}', "semantic": ADD, "procedural": ADD},
               "u/p0-s3": {"core": APPEND, "episodic": ADD, "semantic": SKIP, "procedural": UPDATE}}
    actions = held_out_actions(outputs)
    assert set(actions) == set(AGENTS) and all(a["outputs"] == 4 for a in actions.values())
    assert actions["core"]["shares"] == {"new": 0.75, "edit": 0.25, "nothing": 0.0, "invalid": 0.0}
    assert actions["semantic"]["shares"] == {"new": 0.25, "edit": 0.5, "nothing": 0.25, "invalid": 0.0}
    assert actions["procedural"]["shares"]["invalid"] == 0.25
    assert actions["semantic"]["ops_per_output"] == pytest.approx((1 + 2 + 1 + 1) / 4)  # SKIP is an operation
    assert actions["episodic"]["ops_per_output"] == pytest.approx(3 / 4)
    line = held_out_line("sft", 0, actions)
    assert line.startswith("SFT, 4 held-out outputs per agent: core new 75% / edit 25%;")
    assert "semantic new 25% / edit 50% / nothing 25%" in line
    assert held_out_line("grpo", 1, actions).startswith("GRPO seed 1, 4 held-out")


def test_edits_are_held_against_the_experts_on_the_same_sessions():
    """A Procedural UPDATE where the expert edits Procedural memory is needed; one where the expert leaves it (the
    session changed a Core value) is a false edit, however much else changed."""
    nothing = '{"operations": []}'
    expert = {"u/p1-s0": {"core": REPLACE, "episodic": ADD, "semantic": UPDATE, "procedural": UPDATE},
              "u/p1-s1": {"core": REPLACE, "episodic": ADD, "semantic": nothing, "procedural": nothing},
              "u/p1-s2": {"core": APPEND, "episodic": ADD, "semantic": nothing, "procedural": UPDATE}}
    stage = {"u/p1-s0": {"core": REPLACE, "episodic": ADD, "semantic": ADD, "procedural": UPDATE},
             "u/p1-s1": {"core": APPEND, "episodic": ADD, "semantic": UPDATE, "procedural": UPDATE},
             "u/p1-s2": {"core": APPEND, "episodic": ADD, "semantic": nothing, "procedural": UPDATE}}
    missed = {"u/p1-s0": {"procedural": 0}, "u/p1-s1": {"procedural": 1}, "u/p1-s2": {"procedural": 1}}
    got = edits_against_expert(stage, expert, missed)
    assert got["procedural"] == {"needed": 2, "edited": 2, "landed": 1, "not_needed": 1, "false": 1}
    assert got["core"] == {"needed": 2, "edited": 1, "landed": 1, "not_needed": 1, "false": 0}
    assert got["semantic"] == {"needed": 1, "edited": 0, "landed": 0, "not_needed": 2, "false": 1}
    assert got["episodic"]["needed"] == 0 and got["episodic"]["false"] == 0
    # without the quotes checked, landed is unknown rather than assumed
    assert edits_against_expert(stage, expert)["procedural"]["landed"] is None


def _log(folder, steps):
    """A rollout log as ADRPOTrainer writes it: per step, per agent, G (completion, advantage) pairs."""
    lines = []
    for step, by_agent in steps.items():
        for agent, rollouts in by_agent.items():
            for k, (completion, advantage, *masked) in enumerate(rollouts):
                lines.append({"mode": "train", "step": step, "batch": 0, "process": 0, "num_processes": 1,
                              "session_key": f"u/p0-s{step}", "agent": agent, "k": k, "completion": completion,
                              "reward": 0.5 + advantage / 4, "weight": 1.0, "advantage": advantage,
                              "task_rewarded": True, **({"loss_masked": True} if masked and masked[0] else {})})
    lines.append({"mode": "eval", "step": 1, "session_key": "held/p0-s0", "agent": "semantic", "reward": 1.0,
                  "completion": UPDATE})  # evaluation records are not rollouts of the run
    (folder / "rollouts.0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_rollouts_show_which_kind_the_run_moved_to_and_which_the_advantages_favoured(tmp_path):
    # Semantic (G = 10) edits in half its rollouts at steps 0-3, where ADD scores above UPDATE; by steps 4-7 it
    # only adds. The other agents have G = 2.
    early = {"core": [(APPEND, 0.5), (REPLACE, -0.5)], "episodic": [(ADD, 0.0), (ADD, 0.0)],
             "semantic": [(ADD, 1.0)] * 5 + [(UPDATE, -1.0)] * 5, "procedural": [(ADD, 0.0), ("{", -1.5)]}
    late = {**early, "semantic": [(ADD, 0.0)] * 10}
    _log(tmp_path, {s: (early if s < 4 else late) for s in range(8)})
    actions = rollout_actions(tmp_path, bucket=4)
    assert actions["steps"] == 8 and actions["window"] == 2 and actions["bucket"] == 4
    semantic = actions["agents"]["semantic"]
    assert semantic["first"]["rollouts"] == 20 and semantic["first"]["counts"] == {"new": 10, "edit": 10, "nothing": 0,
                                                                                    "invalid": 0}
    assert semantic["first"]["shares"]["edit"] == 0.5 and semantic["last"]["shares"]["new"] == 1.0
    assert semantic["first"]["mean_advantage"] == {"edit": -1.0, "new": 1.0}
    # the edit share per bucket of 4 steps, keyed by the bucket's last update (1-based)
    assert semantic["edit_share"] == [{"step": 4, "share": 0.5}, {"step": 8, "share": 0.0}]
    assert actions["agents"]["procedural"]["first"]["shares"]["invalid"] == 0.5
    line = rollout_line("adrpo", 0, actions)
    assert "the first 2 of 8 steps -> the last 2" in line
    assert "semantic new 50% -> 100% (early mean advantage highest for new, +1.00)" in line
    # the other agents' 4 rollouts a window are too few (under 10) to say which kind the advantages favoured
    assert "core new 50% -> 50%;" in line and line.count("early mean advantage") == 1
    # a run stopped at the checkpoint of step 4 is read on its first 4 updates' rollouts
    stopped = rollout_actions(tmp_path, bucket=4, until=4)
    assert stopped["steps"] == 4 and stopped["agents"]["semantic"]["edit_share"] == [{"step": 4, "share": 0.5}]
    assert rollout_actions(tmp_path / "missing") is None
    # The reward's own view of editing, session held fixed: in each of the 4 early groups semantic's UPDATEs
    # earned 0.25 and its ADDs 0.75; the late groups sampled no edit. Episodic never edits: no gap.
    gaps = {a: v["edit_minus_new"] for a, v in actions["agents"].items()}
    assert gaps["semantic"] == {"mean": -0.5, "ci": [-0.5, -0.5], "groups": 4}
    assert gaps["core"]["mean"] == -0.25 and gaps["core"]["groups"] == 8 and gaps["episodic"] is None
    gap = gap_line("adrpo", 0, actions)
    assert gap.startswith("ADRPO seed 0, reward of an edit minus new memory only, within the groups")
    assert "semantic -0.500 [-0.500, -0.500] over 4 groups" in gap and "episodic" not in gap


def test_failed_writes_push_the_choice_to_write_at_all_unless_left_out_of_the_loss(tmp_path):
    # Per group: a valid ADD (+1.0), an empty list (+0.5) and a write cut at the token limit (-1.5). The cut write
    # begins as the ADD does, so the choice to write gets +1.0 - 1.5: the update favours writing nothing.
    cut = '{"operations": [{"action": "ADD", "memory": "Walks the dog, walks the dog, walks the'
    empty = '{"operations": []}'

    def push(masked):
        folder = tmp_path / str(masked)
        folder.mkdir(exist_ok=True)
        _log(folder, {s: {"procedural": [(ADD, 1.0), (empty, 0.5), (cut, -1.5, masked)]} for s in range(2)})
        return rollout_actions(folder)

    plain = push(False)["agents"]["procedural"]["write_push"]
    assert plain == {"groups": 2, "valid": 1.0, "failed": -1.5, "writing": -0.5, "nothing": 0.5, "left_out": 0}
    line = push_line("grpo", 0, push(False))
    assert line.startswith("GRPO seed 0, summed advantage on writing at all per group")
    assert "procedural -0.50 (valid writes +1.00, failed -1.50)" in line
    # mask_truncated_completions keeps the cut write out of the loss: writing is pushed up
    masked = push(True)
    assert masked["agents"]["procedural"]["write_push"] == {"groups": 2, "valid": 1.0, "failed": 0.0, "writing": 1.0,
                                                            "nothing": 0.5, "left_out": 2}
    assert "procedural +1.00 (valid writes +1.00, failed +0.00, 2 cut rollouts left out of the loss)" in push_line(
        "grpo", 0, masked)


def test_the_plot_draws_each_runs_edit_share_against_sft(tmp_path):
    _log(tmp_path, {s: {a: [(ADD if a != "core" else APPEND, 0.0), (UPDATE if a != "core" else REPLACE, 0.0)]
                        for a in AGENTS} for s in range(6)})
    sft = held_out_actions({"u/p0-s0": {"core": REPLACE, "episodic": ADD, "semantic": UPDATE, "procedural": ADD}})
    runs = [{"stage": "sft", "seed": 0, "held_out_actions": sft},
            {"stage": "adrpo", "seed": 0, "train_actions": rollout_actions(tmp_path, bucket=2)},
            {"stage": "grpo", "seed": 0, "step": 4, "steps": 6,  # stopped part-way: dotted
             "train_actions": rollout_actions(tmp_path, bucket=2, until=4)}]
    plot_actions(runs, tmp_path / "actions.png")
    assert (tmp_path / "actions.png").stat().st_size > 10_000


def test_inspect_run_reads_any_runs_rollout_log(tmp_path, capsys):
    with pytest.raises(SystemExit, match="no rollout log"):
        inspect_main([str(tmp_path)])
    _log(tmp_path, {s: {a: [(ADD if a != "core" else APPEND, 0.5), (UPDATE if a != "core" else REPLACE, -0.5)]
                        for a in AGENTS} for s in range(4)})
    out = inspect_main([str(tmp_path), "--name", "adrpo-lr1e-4", "--bucket", "2"])
    printed = capsys.readouterr().out
    assert "ADRPO-LR1E-4, train reward over the first 1 of 4 steps" in printed
    assert "ADRPO-LR1E-4, sampled rollouts, the first 1 of 4 steps" in printed
    assert "procedural -0.250 [-0.250, -0.250] over 4 groups" in printed
    saved = json.loads((tmp_path / "inspect.json").read_text())
    assert saved == json.loads(json.dumps(out)) and saved["train_signal"]["agent_prompts"] == 16
    assert saved["train_actions"]["agents"]["semantic"]["edit_share"] == [{"step": 2, "share": 0.5},
                                                                          {"step": 4, "share": 0.5}]
    assert (tmp_path / "actions.png").stat().st_size > 10_000


def test_each_seed_has_a_line_style_whose_whole_period_shows_in_the_legend():
    """Seeds 0-2 draw solid, dashed and dash-dot lines (a stopped run dotted). The plots' legends (7-point text,
    2-point lines) must be long enough for a whole dash period: with matplotlib's default handle only the first
    dash of a dash-dot line showed, and seed 2 read as solid, like seed 0."""
    from matplotlib import rcParams

    seeds = [0, 1, 2]
    assert [seed_line(s, seeds) for s in seeds] == list(SEED_LINES) and seed_line(1, seeds, stopped=True) == ":"
    assert len(set(SEED_LINES)) == len(SEED_LINES) and ":" not in SEED_LINES
    period = {"--": rcParams["lines.dashed_pattern"], "-.": rcParams["lines.dashdot_pattern"]}
    handle_points = LEGEND_HANDLE * 7
    for style in SEED_LINES[1:]:
        assert sum(period[style]) * 2 <= handle_points, style  # matplotlib scales dashes by the line width
    assert sum(period["-."]) * 2 > 2.0 * 7  # what the default handle cut
