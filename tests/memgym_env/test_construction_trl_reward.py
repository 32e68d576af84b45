"""MemoryGym-v0 in a plain ``trl.GRPOTrainer``: the rows, the group reward (ADRPO's), and two training
steps of a tiny random model through the example entry point (evidence mode: no answer model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from membuilder.agents.constructor import render_prompt  # noqa: E402
from membuilder.memory.ops import AGENTS  # noqa: E402
from membuilder.training.trl_reward import SessionReward  # noqa: E402
from memgym_env.construction.config import ConstructionConfig  # noqa: E402
from memgym_env.construction.scoring import SessionScorer  # noqa: E402
from memgym_env.construction.trl_reward import scorer_dataset  # noqa: E402
from train import grpo_plain_trl  # noqa: E402

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "train" / "grpo_plain_trl_cpu.yaml"

OVERRIDES = {"world_overrides": {"num_users": 1, "num_periods": 1, "rounds_update": 1}, "questions_per_session": 3}
BROKEN = "{not json"


@pytest.fixture(scope="module")
def scorer() -> SessionScorer:
    return SessionScorer(ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml", **OVERRIDES), None, 2)


def chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def test_rows_hold_one_prompt_per_session_and_agent(scorer):
    rows = scorer_dataset(scorer).to_list()
    assert [(r["session_key"], r["agent"]) for r in rows] == [(k, a) for k in scorer.session_keys() for a in AGENTS]
    assert rows[1]["prompt"] == render_prompt(AGENTS[1], scorer.observation(rows[1]["session_key"]))
    assert set(scorer_dataset(scorer, agents=["core"])["agent"]) == {"core"}
    with pytest.raises(ValueError, match="subset"):
        scorer_dataset(scorer, agents=["planner"])


def test_a_joint_group_is_scored_as_g_candidates_from_one_snapshot(scorer):
    key = scorer.session_keys()[1]
    expert = scorer.expert_action(key)
    # G = 2 rollouts of all four agents, in TRL's order (each prompt's G copies together)
    outputs = [{a: expert[a] for a in AGENTS}, {**{a: expert[a] for a in AGENTS}, "semantic": BROKEN}]
    keys, agents, completions = [], [], []
    for a in AGENTS:
        for k in range(2):
            keys.append(key)
            agents.append(a)
            completions.append(chat(outputs[k][a]))
    reward = SessionReward(scorer)
    got = reward(prompts=[None] * 8, completions=completions, session_key=keys, agent=agents)
    want = scorer.score(key, outputs)
    assert got == [want[k].agent_rewards[a] for a in AGENTS for k in range(2)]
    assert got[AGENTS.index("semantic") * 2 + 1] == 0.0 and got[0] > 0.0  # the broken semantic output alone is 0


def test_per_agent_credit_scores_each_agent_of_a_whole_session_beside_the_experts_outputs(scorer):
    """An agent's G rewards then differ by its own outputs alone: the Core completions are the same, so
    Core's group ties although another agent's second rollout is broken."""
    key = scorer.session_keys()[1]
    expert = scorer.expert_action(key)
    outputs = [dict(expert), {**expert, "semantic": BROKEN}]
    keys = [key] * 8
    agents = [a for a in AGENTS for _ in range(2)]
    completions = [chat(outputs[k][a]) for a in AGENTS for k in range(2)]
    got = SessionReward(scorer, credit="per_agent")(prompts=[None] * 8, completions=completions, session_key=keys,
                                                    agent=agents)
    alone = {a: scorer.score(key, [{**expert, a: outputs[k][a]} for k in range(2)]) for a in AGENTS}
    assert got == [alone[a][k].agent_rewards[a] for a in AGENTS for k in range(2)]
    assert got[0] == got[1] > 0.0 and got[AGENTS.index("semantic") * 2 + 1] == 0.0
    with pytest.raises(ValueError, match="credit"):
        SessionReward(scorer, credit="shapley")


def test_a_single_agent_row_is_scored_with_the_experts_other_outputs(scorer):
    key = scorer.session_keys()[1]
    expert = scorer.expert_action(key)
    logged = {}
    rewards = SessionReward(scorer)(prompts=[None] * 3, completions=[expert["core"], BROKEN, expert["core"]],
                                    session_key=[key] * 3, agent=["core"] * 3,
                                    log_metric=lambda name, value: logged.__setitem__(name, value))
    want = scorer.score(key, [expert, {**expert, "core": BROKEN}])
    assert rewards == [want[0].agent_rewards["core"], 0.0, want[0].agent_rewards["core"]]
    assert rewards[0] > 0 and set(logged) >= {"adrpo/weight_core", "reward/task", "reward/valid_core"}
    assert "adrpo/weight_semantic" not in logged  # only the agent the rows hold is reported
    with pytest.raises(ValueError, match="planner"):
        SessionReward(scorer)(prompts=[None], completions=["x"], session_key=[key], agent=["planner"])


def test_the_plain_trl_example_trains_two_steps(tiny_chat_path, tmp_path):
    trainer = grpo_plain_trl.main(["--config", str(CONFIG), "--model_name_or_path", tiny_chat_path,
                                   "--env_overrides", json.dumps(OVERRIDES), "--users", "0",
                                   "--max_sessions_per_user", "2", "--max_completion_length", "8",
                                   "--output_dir", str(tmp_path)])
    assert type(trainer).__name__ == "GRPOTrainer" and trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "rewards/session_reward/mean" in h]
    # the metrics ADRPO's trainer logs, under the same names
    assert len(logged) == 2 and {"reward/task", "adrpo/weight_mean", "adrpo/dominant_none"} <= set(logged[0])


def test_the_plain_trl_script_with_its_defaults_learns(tmp_path):
    """The shipped config as it is (the shipped policy, the limit from the oracle's outputs), 2 steps: every
    logged step has rollouts that earn different rewards, so GRPO has a signal (at the old 64-token limit
    every completion was cut, and every reward, its std and the loss were 0)."""
    trainer = grpo_plain_trl.main(["--config", str(CONFIG), "--output_dir", str(tmp_path)])
    logged = [h for h in trainer.state.log_history if "reward_std" in h]
    assert trainer.state.global_step == 2 and len(logged) == 2
    assert trainer.args.max_completion_length == 96  # the oracle's longest output on users 0-1, 2 sessions each
    assert all(h["reward_std"] > 0 and h["completions/clipped_ratio"] < 1 for h in logged), logged
