"""MemoryGym-v0 served as an OpenEnv environment: whole episodes over a loopback WebSocket with
OpenEnv's own clients, step for step equal to ``gym.make`` on the same seed (evidence mode).

openenv-core is part of the test setup (``make setup`` installs memgym[openenv]); this test does
not skip without it."""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient

import memgym_env  # noqa: F401  (registers MemoryGym-v0)
from membuilder.memory.ops import AGENTS
from membuilder.plumbing.http import HttpServer
from memgym_env.commands import serve_env
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SessionScorer
from memgym_env.serving.env_app import build_app
from memgym_env.serving.openenv_env import MemoryAction, MemoryGymClient

CONFIG = ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml", questions_per_session=3,
                                      world_overrides={"num_users": 2, "num_periods": 1, "rounds_update": 1})
EMPTY = {"core": "", "episodic": '{"operations": []}', "semantic": '{"operations": []}', "procedural": '{"operations": []}'}


@pytest.fixture(scope="module")
def server():
    app, _ = build_app(CONFIG, max_sessions_per_user=2, openenv="on", max_concurrent_envs=4)
    srv = HttpServer(app, port=0).start()
    yield srv
    srv.stop()


def policy(local_env, t: int) -> dict[str, str]:
    """The expert on most sessions, nothing on every third: rewards that differ from step to step."""
    return EMPTY if t % 3 == 2 else local_env.unwrapped.expert_action()


def plain(value):
    return json.loads(json.dumps(value))


def play(url: str, seed: int, typed: bool) -> list[tuple[float, dict]]:
    """A whole episode over the WebSocket, the local env stepped alongside with the same actions."""
    local = gym.make("MemoryGym-v0", config=CONFIG)
    obs, info = local.reset(seed=seed)
    client = (MemoryGymClient if typed else GenericEnvClient)(base_url=url).sync()
    steps = []
    with client:
        result = client.reset(seed=seed)
        got = result.observation.model_dump() if typed else result.observation
        assert got["session"] == obs["session"] and got["info"] == plain(info)
        done, t = False, 0
        while not done:
            action = policy(local, t)
            obs, reward, done, _, info = local.step(action)
            result = client.step(MemoryAction(**action) if typed else action)
            got = result.observation.model_dump() if typed else result.observation
            assert result.reward == reward and result.done == done
            assert got["info"] == plain(info)
            assert [got[k] for k in ("session", "core", *AGENTS[1:])] == [
                obs["session"], obs["core"], *[list(obs[a]) for a in AGENTS[1:]]]
            steps.append((reward, info))
            t += 1
    local.close()
    return steps


def test_a_full_episode_over_openenv_equals_gym_make(server):
    steps = play(server.url, seed=0, typed=False)
    assert len(steps) > 3 and steps[-1][1]["session_index"] == len(steps) - 1
    rewards = [r for r, _ in steps]
    assert max(rewards) > 0 and min(rewards) == 0.0  # the expert earns, the empty writer does not


def test_concurrent_sessions_each_keep_their_own_episode(server):
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda seed: play(server.url, seed, typed=True), [0, 1]))
    # Both finished, each compared step for step with its own local env inside play().
    assert [len(run) for run in runs] == [sessions_of(0), sessions_of(1)]


def sessions_of(seed: int) -> int:
    env = gym.make("MemoryGym-v0", config=CONFIG)
    n = env.reset(seed=seed)[1]["num_sessions"]
    env.close()
    return n


def test_schema_bad_actions_and_scoring_on_the_same_app(server):
    schema = httpx.get(f"{server.url}/schema").json()
    assert set(AGENTS) <= set(schema["action"]["properties"]) and "info" in schema["observation"]["properties"]
    with GenericEnvClient(base_url=server.url).sync() as client:
        client.reset(seed=0)
        # No core output: OpenEnv refuses the action (its WebSocket error says VALIDATION_ERROR, not which
        # field) and the session goes on.
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"episodic": "", "semantic": "", "procedural": ""})
        assert client.step(EMPTY).reward == 0.0
    keys = httpx.get(f"{server.url}/sessions").json()["session_keys"]
    scored = httpx.post(f"{server.url}/score", json={"session_key": keys[0], "candidates": [EMPTY]}).json()
    assert scored["rewards"][0]["agent_rewards"]["core"] == 0.0


def test_plain_http_step_says_episodes_need_the_websocket(server):
    # /reset over HTTP answers (a first observation), but OpenEnv keeps no env between HTTP requests:
    # /step answers a 409 that names the WebSocket, not OpenEnv's 500 "call reset() before step()".
    assert httpx.post(f"{server.url}/reset", json={"seed": 0}).status_code == 200
    answer = httpx.post(f"{server.url}/step", json={"action": EMPTY})
    assert answer.status_code == 409 and "/ws" in answer.json()["error"]["message"]


def test_the_scoring_counters_stay_reachable_beside_openenvs_health(server):
    before = httpx.get(f"{server.url}/scoring/health").json()["scored"]
    keys = httpx.get(f"{server.url}/sessions").json()["session_keys"]
    assert httpx.post(f"{server.url}/score", json={"session_key": keys[0], "candidates": [EMPTY]}).status_code == 200
    counters = httpx.get(f"{server.url}/scoring/health").json()
    assert counters["scored"] == before + 1 and counters["sessions"] == len(keys) and counters["waiting"] == 0
    assert httpx.get(f"{server.url}/health").status_code == 200  # OpenEnv's own, unchanged


def test_serve_env_serves_the_sessions_its_pick_chooses():
    config = ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml", questions_per_session=3,
                                          world_overrides={"num_users": 1, "num_periods": 2, "rounds_update": 1})
    parser = argparse.ArgumentParser()
    serve_env.add_arguments(parser)
    args = parser.parse_args(["--session-pick", "every_period", "--max-sessions-per-user", "2"])
    app, _ = build_app(config, max_sessions_per_user=args.max_sessions_per_user, openenv="off",
                       session_pick=args.session_pick)
    srv = HttpServer(app, port=0).start()
    try:
        served = httpx.get(f"{srv.url}/sessions").json()["session_keys"]
    finally:
        srv.stop()
    local = SessionScorer(config, None, 2, pick="every_period")
    assert served == local.session_keys() and {local.period(k) for k in served} == {0, 1}
    with pytest.raises(SystemExit):
        parser.parse_args(["--session-pick", "last"])
