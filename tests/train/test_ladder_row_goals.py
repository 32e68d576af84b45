"""The ladder report's per-row goals: each read as met or missed, with the figure it rests on."""

from __future__ import annotations

from membuilder.memory.ops import AGENTS
from train.ladder.row_goals import edit_share_goal, grounding_goals, row_goal_lines, validity_goal


def _row(stage, seed=0, valid=1.0, semantic_edits=0.9, grounded=(95, 100), distinct=(50, 60)):
    return {"stage": stage, "seed": seed,
            "valid_rate": {a: valid if a == "semantic" else 1.0 for a in AGENTS},
            "held_out_actions_changed": {a: {"shares": {"edit": semantic_edits if a == "semantic" else 1.0}}
                                         for a in AGENTS},
            "real_grounding": {"all": {"entries": grounded[1], "grounded": grounded[0]},
                               "distinct": {"dialogue": {"entries": distinct[1], "grounded": distinct[0]},
                                            "questions": 3}}}


def test_validity_counts_trained_stages_and_names_the_lowest():
    rows = [_row("base", valid=0.0), _row("sft", valid=0.98), _row("grpo", valid=0.93)]
    assert validity_goal(rows) == ("Every agent at least 95% valid JSON after SFT and RL (held-out): missed; lowest "
                                   "grpo seed 0 semantic 0.930 (-0.020)")
    # 91 of 96 is below the goal though two places print it as 0.95: the line gives three places and the count
    rows[2] = {**_row("grpo", valid=91 / 96), "held_out_sessions": 96}
    assert validity_goal(rows).endswith("missed; lowest grpo seed 0 semantic 0.948, 91 of 96 outputs (-0.002)")
    assert validity_goal(rows[:2]).startswith("Every agent at least 95% valid JSON after SFT and RL (held-out): met")


def test_edit_share_after_rl_against_sfts():
    assert edit_share_goal([_row("sft"), _row("grpo", semantic_edits=0.95)]).endswith("met in 1 RL run(s) "
                                                                                      "(smallest margin +0.00)")
    assert "missed (adrpo seed 1 semantic 0.80 < 0.90)" in edit_share_goal(
        [_row("sft"), _row("grpo"), _row("adrpo", 1, semantic_edits=0.8)])
    # with the count of changed sessions, one session short reads as one session, not as 0.99 < 1.00
    sft, rl = _row("sft", semantic_edits=1.0), _row("grpo", 2, semantic_edits=79 / 80)
    for r in (sft, rl):
        r["held_out_actions_changed"]["semantic"]["outputs"] = 80
    assert "missed (grpo seed 2 semantic 79/80 < 80/80)" in edit_share_goal([sft, rl])


def test_grounding_by_the_rule_and_over_distinct_entries_against_the_dialogue():
    # 0.99 by the rule (at least 90% and SFT's 0.95): met; 0.70 over distinct entries, below 90%: missed
    rows = [_row("sft"), _row("grpo", grounded=(99, 100), distinct=(70, 100)), _row("adrpo", 1, grounded=(90, 100))]
    lines = grounding_goals(rows)
    assert len(lines) == 2 and lines[0].startswith("conv-26, grpo seed 0:")
    assert "by the issue's rule 0.99 [0.95, 1.00] of 100, met" in lines[0]
    assert "against the dialogue alone 0.70 [0.60, 0.78] of 100, missed (3 of them questions" in lines[0]
    assert "by the issue's rule 0.90 [0.83, 0.94] of 100, missed" in lines[1]  # below SFT's 0.95
    assert grounding_goals([_row("grpo")]) == []  # no SFT to hold it against
    assert len(row_goal_lines(rows)) == 4
