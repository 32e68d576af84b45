"""MemoryGym-v0 on a small generated world, with the real embedder (and SmolLM2 for choice mode)."""

from __future__ import annotations

import codecs
import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml
from gymnasium.utils.env_checker import check_env

import memgym_env  # noqa: F401  (registers the environments)
from memgym_env.construction.env import ConstructionConfig, MemoryGymEnv
from memgym_env.construction.scoring import SessionScorer

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"num_users": 2, "num_periods": 1}
EMPTY = {"core": "", "episodic": '{"operations": []}', "semantic": '{"operations": []}', "procedural": '{"operations": []}'}


@pytest.fixture(scope="module")
def env():
    e = MemoryGymEnv(answer_mode="evidence", world_overrides=SMALL, questions_per_session=3)
    yield e
    e.close()


def play(env, policy, seed=0):
    obs, _ = env.reset(seed=seed, options={"episode": 0})
    rewards, infos = [], []
    done = False
    while not done:
        action = env.expert_action() if policy == "oracle" else EMPTY
        obs, r, done, _, info = env.step(action)
        rewards.append(r)
        infos.append(info)
    return rewards, infos


def blind(action: dict[str, str]) -> dict[str, str]:
    """The same writes with every written word rot13-ed: same validity, same token counts, and a
    memory that answers nothing."""
    def scramble(value):
        if isinstance(value, str):
            return codecs.encode(value, "rot13")
        if isinstance(value, list):
            return [scramble(v) for v in value]
        return {k: v if k in ("operation", "action") else scramble(v) for k, v in value.items()}

    return {agent: json.dumps(scramble(json.loads(text))) for agent, text in action.items()}


def test_passes_gymnasium_env_checker(env):
    check_env(env, skip_render_check=True)


@pytest.mark.parametrize("mode", ["choice", "llm"])
def test_passes_gymnasium_env_checker_with_answer_models(mode, tiny_chat_path):
    """Step info must be the same for the same seed: the models' running usage is not in it."""
    e = MemoryGymEnv(answer_mode=mode, answerer=tiny_chat_path, world_overrides={"num_users": 1, "num_periods": 1},
                     questions_per_session=2)
    check_env(e, skip_render_check=True)
    assert e.model_usage()["answerer"]["calls"] > 0


def test_oracle_scores_high_and_empty_policy_scores_zero(env):
    oracle, infos = play(env, "oracle")
    assert np.mean(oracle) >= 0.9
    assert all(all(i["valid"].values()) for i in infos)
    # Played on its own memory, a policy that writes nothing has nothing to answer from. (Under the
    # expert snapshot its store agents could still score on questions about earlier sessions.)
    own = MemoryGymEnv(answer_mode="evidence", world_overrides=SMALL, questions_per_session=3, snapshot="on_policy")
    empty, infos = play(own, "empty")
    assert empty == [0.0] * len(empty)
    assert all(i["valid"]["core"] is False for i in infos)  # an empty Core output is invalid


def test_info_reports_each_question_and_agent(env):
    env.reset(seed=0, options={"episode": 0})
    _, _, _, _, info = env.step(env.expert_action())
    assert set(info["agent_rewards"]) == {"core", "episodic", "semantic", "procedural"}
    assert info["questions"] and {"question", "gold", "answer", "correct"} <= set(info["questions"][0])
    assert sum(info["attribution_counts"].values()) > 0
    assert max(info["weights"].values()) == env.config.alpha
    assert info["weights"][info["dominant"]] == env.config.alpha


def test_invalid_agent_gets_zero_and_the_others_keep_their_reward(env):
    env.reset(seed=0, options={"episode": 0})
    action = env.expert_action() | {"procedural": "I would rather not say"}
    (scored,) = env.score_candidates([action])
    assert scored.valid["procedural"] is False and scored.agent_rewards["procedural"] == 0.0
    assert scored.agent_rewards["semantic"] > 0
    assert "no JSON object" in scored.info["errors"]["procedural"][0]


def test_candidates_are_scored_from_one_snapshot_in_any_order(env):
    env.reset(seed=0, options={"episode": 0})
    expert = env.expert_action()
    half = expert | {"semantic": '{"operations": []}'}
    before = len(env.snapshot)
    a = env.score_candidates([expert, EMPTY, half])
    b = env.score_candidates([half, expert, EMPTY])
    assert [a[0].agent_rewards, a[1].agent_rewards, a[2].agent_rewards] == [
        b[1].agent_rewards, b[2].agent_rewards, b[0].agent_rewards]
    assert len(env.snapshot) == before  # scoring does not move the environment


def test_each_candidate_scored_with_the_others_gets_its_reward_alone(env):
    """G rollouts share parsing, embedding, stores and evidence checks; never a reward."""
    from membuilder.memory.ops import Add, render_ops

    extra = render_ops("semantic", [Add("Weekend plans: visiting the coast | Details: mentioned in passing")])
    noop = '{"operations": []}'
    env.reset(seed=0, options={"episode": 0})
    for _ in range(3):  # an empty snapshot, then the expert's memory of one and two sessions
        expert = env.expert_action()
        cands = [expert, expert | {"semantic": noop}, expert | {"procedural": noop}, expert | {"episodic": noop},
                 expert | {"core": "not json"}, expert | {"semantic": extra}, expert, EMPTY]
        together = env.score_candidates(cands)
        alone = [env.score_candidates([c])[0] for c in cands]
        assert together == alone  # rewards, weights, validity, penalties, every question's answer
        assert together[0] == together[6]  # a repeated rollout: the same reward
        assert len({r.reward for r in together}) >= 3  # the rollouts really differ
        env.step(expert)


def test_expert_snapshot_restores_expert_memory_but_on_policy_keeps_own_writes():
    expert_env = MemoryGymEnv(answer_mode="evidence", world_overrides=SMALL, snapshot="expert")
    expert_env.reset(seed=0, options={"episode": 0})
    obs, *_ = expert_env.step(EMPTY)
    assert obs["core"]  # the expert's memory, not the empty policy's
    own_env = MemoryGymEnv(answer_mode="evidence", world_overrides=SMALL, snapshot="on_policy")
    own_env.reset(seed=0, options={"episode": 0})
    obs, *_ = own_env.step(EMPTY)
    assert obs["core"] == "" and obs["semantic"] == ()


def test_unrewarded_session_asks_nothing_and_scores_the_writes_alone():
    scorer = SessionScorer(ConstructionConfig(answer_mode="evidence", world_overrides=SMALL, questions_per_session=3),
                           users=[0], max_sessions_per_user=2)
    key = scorer.session_keys()[1]
    expert = scorer.expert_action(key)
    knows, knows_nothing = scorer.score(key, [expert, blind(expert)])
    assert knows.task_reward > knows_nothing.task_reward  # rewarded: the memory's answers count
    assert knows.valid == knows_nothing.valid
    knows, knows_nothing = scorer.score(key, [expert, blind(expert)], task_rewarded=False)
    assert knows_nothing.reward <= knows.reward and knows_nothing.agent_rewards == knows.agent_rewards
    for r in (knows, knows_nothing):
        assert not r.task_rewarded and r.info["questions"] == []  # no question was asked
        assert r.dominant is None and set(r.weights.values()) == {1.0}


def test_lambda_zero_means_no_length_penalty_in_the_env():
    env = MemoryGymEnv(answer_mode="evidence", world_overrides=SMALL, questions_per_session=3, lam=0)
    env.reset(seed=0, options={"episode": 0})
    long_core = '{"operation": "APPEND", "content": "' + "the user keeps a long diary entry. " * 80 + '"}'
    (r,) = env.score_candidates([env.expert_action() | {"core": long_core}])
    assert r.length_penalty["core"] == 1.0 and r.agent_rewards["core"] == pytest.approx(r.task_reward)
    with pytest.raises(ValueError, match="lam"):
        ConstructionConfig(lam=None)


def test_reward_density_drops_task_reward_on_most_sessions():
    sparse = MemoryGymEnv(answer_mode="evidence", world_overrides=SMALL, reward_density=1000)
    sparse.reset(seed=0, options={"episode": 0})
    _, reward, _, _, info = sparse.step(sparse.expert_action())
    assert info["task_rewarded"] is False
    # Validity and length still count: a valid expert write of the expert's own length earns 1.
    assert reward == pytest.approx(1.0)
    _, reward, _, _, info = sparse.step(EMPTY)
    assert info["valid"]["core"] is False and info["agent_rewards"]["core"] == 0.0


def test_same_seed_same_episode_and_rewards():
    runs = []
    for _ in range(2):
        e = MemoryGymEnv(answer_mode="evidence", world_overrides=SMALL)
        obs, info = e.reset(seed=7)
        _, r, _, _, _ = e.step(e.expert_action())
        runs.append((info["conversation"], obs["session"], r))
    assert runs[0] == runs[1]


def test_registered_env_and_vector_envs_run():
    env = gym.make("MemoryGym-v0", answer_mode="evidence", world_overrides=SMALL)
    obs, _ = env.reset(seed=0)
    assert isinstance(obs["session"], str)
    env.close()
    # Async workers are spawned: forking a parent that already runs torch threads can deadlock.
    for mode, kwargs in (("sync", {}), ("async", {"shared_memory": False, "context": "spawn"})):
        venv = gym.make_vec("MemoryGym-v0", num_envs=2, vectorization_mode=mode, vector_kwargs=kwargs,
                            answer_mode="evidence", world_overrides=SMALL)
        obs, _ = venv.reset(seed=0)
        actions = {k: tuple(EMPTY[k] for _ in range(2)) for k in EMPTY}
        _, rewards, *_ = venv.step(actions)
        assert list(rewards) == [0.0, 0.0]
        venv.close()
    shared = gym.make_vec("MemoryGym-v0", num_envs=3, vectorization_mode="vector_entry_point",
                          answer_mode="evidence", world_overrides=SMALL)
    obs, _ = shared.reset(seed=0)
    assert len(obs["session"]) == 3
    subs = [e for e in shared.envs]
    assert subs[0]._cache is subs[1]._cache is subs[2]._cache  # one embedder for all
    shared.close()


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="answer_mode"):
        ConstructionConfig(answer_mode="vibes")
    with pytest.raises(ValueError, match="conversation_path"):
        MemoryGymEnv(source="conversation", answer_mode="evidence").reset(seed=0)


def test_choice_mode_with_smollm2_scores_oracle_above_empty():
    # The first session: both write into an empty memory, so only what each wrote can answer.
    env = MemoryGymEnv(answer_mode="choice", world_overrides={"num_users": 1, "num_periods": 1}, questions_per_session=5)
    env.reset(seed=0, options={"episode": 0})
    oracle, empty = env.score_candidates([env.expert_action(), EMPTY])
    assert oracle.task_rewarded and 0.0 <= oracle.task_reward <= 1.0
    assert empty.valid["core"] is False and empty.agent_rewards["core"] == 0.0  # an empty Core output is invalid
    assert oracle.reward > empty.reward
    print(f"SmolLM2 choice-mode task reward, oracle memory: {oracle.task_reward:.2f}")


def test_trainer_scorer_replays_expert_snapshots_in_any_order(env):
    scorer = SessionScorer(ConstructionConfig(answer_mode="evidence", world_overrides={"num_users": 1}),
                           max_sessions_per_user=3)
    keys = scorer.session_keys()
    assert len(keys) == 3
    # The trainer's observation of a session is the environment's, so training prompts match.
    live = MemoryGymEnv(answer_mode="evidence", world_overrides={"num_users": 1, "num_periods": 2})
    obs, _ = live.reset(seed=0, options={"episode": 0})
    live.step(live.expert_action())
    obs, *_ = live.step(EMPTY)
    offline = scorer.observation(keys[2])
    assert {k: offline[k] for k in ("session", "core", "episodic", "semantic", "procedural")} == {
        k: obs[k] for k in ("session", "core", "episodic", "semantic", "procedural")}
    last = scorer.score(keys[2], [EMPTY])
    first = scorer.score(keys[0], [EMPTY])
    assert scorer.score(keys[2], [EMPTY])[0].agent_rewards == last[0].agent_rewards  # order does not matter
    assert first[0].reward == 0.0


@pytest.mark.parametrize("view", ["all", "live"])
def test_write_view_live_leaves_replaced_entries_out_of_the_writers_view(view):
    """A fact written, then UPDATEd: under ``write_view: all`` (as published) the writer's next view shows the
    old version beside the new one, under ``live`` only the new one; the answerer's view is not touched."""
    env = MemoryGymEnv(answer_mode="evidence", world_overrides={"num_users": 1, "num_periods": 2},
                       snapshot="on_policy", write_view=view)
    env.reset(seed=0, options={"episode": 0})
    old, new = "Ana's cooking: risotto on weekends", "Ana's cooking: paella on weekends"
    env.step({**EMPTY, "semantic": json.dumps({"operations": [{"action": "ADD", "memory": old}]})})
    update = {"action": "UPDATE", "old_memory": old, "new_memory": new}
    obs, *_ = env.step({**EMPTY, "semantic": json.dumps({"operations": [update]})})
    assert new in obs["semantic"]
    assert (old in obs["semantic"]) is (view == "all")
    env.close()


def test_write_view_names_its_values():
    with pytest.raises(ValueError, match="write_view 'current'"):
        ConstructionConfig(write_view="current")


def test_the_full_settings_file_names_every_field_at_its_default():
    """configs/env/construction.yaml says it shows every field: it does, and it builds the defaults."""
    shown = yaml.safe_load((ROOT / "configs/env/construction.yaml").read_text(encoding="utf-8"))
    assert set(shown) == {f.name for f in dataclasses.fields(ConstructionConfig)}
    assert ConstructionConfig.from_yaml(ROOT / "configs/env/construction.yaml") == ConstructionConfig()
