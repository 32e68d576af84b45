"""train/ladder/credit_check.py on a logged RL step of a real (small) tracks-change world: the run's own
credit reproduces its logged rewards, and per-agent credit leaves an agent's group tied where only the
other agents' samples differ."""

from __future__ import annotations

import json

import pytest
import yaml

from membuilder.memory.ops import AGENTS, OPS_SCHEMA
from membuilder.training.trl_reward import SessionReward
from memgym_env.construction.actions import updates_as_adds
from train.ladder import credit_check

STAGE = {"scorer": "env", "env_config": "configs/env/construction_cpu_change.yaml",
         "env_overrides": {"world_overrides": {"num_users": 1, "num_periods": 2, "rounds_update": 1}},
         "users": "0", "credit": "joint"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One logged step of two sessions, G = 2: rollout 0 writes what the expert wrote, rollout 1 the same
    with every UPDATE written as an ADD beside the stale entry."""
    folder = tmp_path_factory.mktemp("grpo")
    (folder / "stage.yaml").write_text(yaml.safe_dump(STAGE))
    scorer, trained = credit_check.run_scorer(folder)
    keys = [k for k in scorer.session_keys() if k.endswith(("p1-s2", "p2-s1"))]  # Semantic and Procedural update
    assert len(keys) == 2 and trained == "joint"
    lines, logged = [], {}
    reward = SessionReward(scorer)
    for key in keys:
        expert = scorer.expert_action(key)
        rollouts = [expert, updates_as_adds(expert)]
        rows = [(a, k) for a in AGENTS for k in range(2)]
        got = reward(prompts=[None] * 8, completions=[rollouts[k][a] for a, k in rows], session_key=[key] * 8,
                     agent=[a for a, _ in rows])
        for (a, k), r in zip(rows, got, strict=True):
            logged[(key, a, k)] = r
            lines.append(json.dumps({"mode": "train", "step": 0, "session_key": key, "agent": a, "k": k,
                                     "completion": rollouts[k][a], "reward": r, "advantage": 0.0}))
    (folder / "rollouts.0.jsonl").write_text("\n".join(lines) + "\n")
    return folder, scorer, logged


def test_the_trained_credit_reproduces_the_log_and_per_agent_credit_isolates_each_agent(run):
    folder, scorer, logged = run
    result = credit_check.credit_check(folder, scorer, "joint")
    assert result["sessions"] == 2 and result["logged_rewards_reproduced"] == {"equal": 16, "of": 16}
    assert result["ops_schema"] == OPS_SCHEMA
    per, joint = result["credits"]["per_agent"], result["credits"]["joint"]
    # Core and Episodic wrote the same text in both rollouts: alone, nothing separates them
    assert per["core"]["tied_share"] == per["episodic"]["tied_share"] == 1.0
    joint_core_ties = [logged[(k, "core", 0)] == logged[(k, "core", 1)] for k in {k for k, _, _ in logged}]
    assert joint["core"]["tied_share"] == sum(joint_core_ties) / 2
    # an UPDATE that replaced its entry earns more than the same text added beside the stale one, both ways
    for credit in ("joint", "per_agent"):
        gap = result["credits"][credit]["semantic"]["edit_minus_new"]
        assert gap["groups"] == 2 and gap["mean"] > 0
    text = credit_check.table(result)
    assert "reproduced 16 of 16" in text and text.count("\n| ") == len(AGENTS) + 1


def test_the_command_writes_its_json_and_table_and_refuses_a_folder_without_a_run(run, tmp_path, capsys):
    folder, _, _ = run
    out = credit_check.main([str(folder)])
    assert json.loads((folder / "credit_check.json").read_text()) == json.loads(json.dumps(out))
    assert (folder / "credit_check.md").read_text().strip() in capsys.readouterr().out
    with pytest.raises(SystemExit, match="stage.yaml"):
        credit_check.main([str(tmp_path)])
