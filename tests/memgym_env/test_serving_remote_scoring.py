"""The scoring service and ``RemoteScorer``: real ``memgym serve-env`` processes on loopback, compared
with the local ``SessionScorer`` on the same world (evidence mode: no language model needed)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, replace

import httpx
import pytest

from bench import remote_scoring as remote_scoring_bench
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SessionScorer
from memgym_env.serving.remote_scorer import RemoteScorer, RemoteScoringError
from memgym_env.serving.replicas import start_replicas, stop_replicas

ENV_CONFIG = "configs/env/construction_cpu.yaml"
OVERRIDES = {"world_overrides": {"num_users": 2, "num_periods": 1, "rounds_update": 1}, "questions_per_session": 3}
SESSIONS_PER_USER = 3
EMPTY = {"core": "", "episodic": '{"operations": []}', "semantic": '{"operations": []}', "procedural": '{"operations": []}'}


@pytest.fixture(scope="module")
def config() -> ConstructionConfig:
    return ConstructionConfig.from_yaml(ENV_CONFIG, **OVERRIDES)


@pytest.fixture(scope="module")
def local(config) -> SessionScorer:
    return SessionScorer(config, None, SESSIONS_PER_USER)


@pytest.fixture(scope="module")
def replicas():
    """Three replica processes: two that live through the module and one the kill test ends."""
    started = start_replicas(3, OVERRIDES, env_config=ENV_CONFIG,
                             extra_args=("--max-sessions-per-user", str(SESSIONS_PER_USER), "--openenv", "off"))
    yield started
    stop_replicas([p for p, _ in started])


def candidates(local: SessionScorer, key: str) -> list[dict[str, str]]:
    """Rollouts that earn different rewards: the expert, nothing, the expert's Core alone, the expert's
    stores with a broken Core."""
    expert = local.expert_action(key)
    return [expert, EMPTY, {**EMPTY, "core": expert["core"]}, {**expert, "core": "{not json"}]


def plain(rewards) -> list[dict]:
    return [json.loads(json.dumps(asdict(r))) for r in rewards]


def test_two_replicas_give_the_local_rewards(replicas, local, config):
    remote = RemoteScorer([replicas[0][1], replicas[1][1]], expected_config=config)
    keys = local.session_keys()
    assert remote.session_keys() == keys and len(keys) == 2 * SESSIONS_PER_USER
    assert remote.reward_density == local.reward_density
    for key in keys:
        assert remote.observation(key) == local.observation(key)
        assert remote.expert_action(key) == local.expert_action(key)
        for rewarded in (True, False):
            assert plain(remote.score(key, candidates(local, key), task_rewarded=rewarded)) == plain(
                local.score(key, candidates(local, key), task_rewarded=rewarded))
    batch = [(k, candidates(local, k), True) for k in keys]
    before = [httpx.get(f"{u}/health").json()["scored"] for _, u in replicas[:2]]
    got = remote.score_many(batch)  # sessions in parallel over both replicas, answers in request order
    assert [plain(r) for r in got] == [plain(local.score(k, c, task_rewarded=True)) for k, c, _ in batch]
    spread = [httpx.get(f"{u}/health").json()["scored"] - n for (_, u), n in zip(replicas[:2], before)]
    assert sum(spread) == len(batch) and min(spread) > 0  # the batch itself was spread over both replicas
    assert {r.reward for rs in got for r in rs} != {0.0}  # the rewards compared are not all zero
    remote.close()


def test_a_replica_killed_mid_run_is_retried_on_the_other(replicas, local):
    victim, victim_url = replicas[2]
    survivor_url = replicas[0][1]
    remote = RemoteScorer([victim_url, survivor_url], retries=1, backoff_s=0.0)
    strict = RemoteScorer([victim_url, survivor_url], retries=0)
    keys = local.session_keys()
    first = remote.score(keys[0], candidates(local, keys[0]))
    victim.kill()
    victim.wait(timeout=20)
    rest = [remote.score(k, candidates(local, k)) for k in keys]
    assert remote.attempts_failed >= 1  # the dead replica was tried and passed over
    assert [plain(r) for r in [first, *rest]] == [plain(local.score(k, candidates(local, k))) for k in [keys[0], *keys]]
    # Without a retry left, a call that meets the dead replica raises and says where: never a reward of zero.
    with pytest.raises(RemoteScoringError, match=rf"1 attempt\(s\).*{victim_url}: ConnectError"):
        strict.score(keys[0], candidates(local, keys[0]))
    with pytest.raises(RemoteScoringError, match="cannot be reached"):
        RemoteScorer([victim_url])


def test_bad_requests_get_errors_that_name_the_field(replicas, local):
    url = replicas[0][1]
    key = local.session_keys()[0]

    def post(body) -> httpx.Response:
        return httpx.post(f"{url}/score", content=body if isinstance(body, (str, bytes)) else json.dumps(body))

    cases = [
        ("{oops", 400, "not JSON"),
        ({"candidates": [EMPTY]}, 400, "'session_key'"),
        ({"session_key": key}, 400, "'candidates'"),
        ({"session_key": key, "candidates": []}, 400, "'candidates'"),
        ({"session_key": key, "candidates": [EMPTY, {"core": ""}]}, 400, r"'candidates\[1\]'.*missing"),
        ({"session_key": key, "candidates": [{**EMPTY, "core": 3}]}, 400, r"'candidates\[0\].core'"),
        ({"session_key": key, "candidates": [EMPTY], "task_rewarded": "yes"}, 400, "'task_rewarded'"),
        ({"session_key": key, "candidates": [EMPTY], "alpha": 2}, 400, "unknown field"),
        ({"session_key": "nobody/s0", "candidates": [EMPTY]}, 404, "not served here"),
    ]
    for body, status, message in cases:
        response = post(body)
        assert response.status_code == status, (body, response.text)
        assert re.search(message, response.json()["error"]["message"]), (body, response.text)
    assert httpx.get(f"{url}/observation").status_code == 400
    assert httpx.get(f"{url}/nowhere").status_code == 404
    # The client raises a 4xx at once, with the replica's message, instead of retrying it.
    remote = RemoteScorer([url])
    with pytest.raises(ValueError, match="not served here"):
        remote.score("nobody/s0", [EMPTY])
    assert remote.attempts_failed == 0


def test_replicas_on_another_config_are_refused(replicas, config):
    with pytest.raises(ValueError, match=r"lam: replicas 0.8, this run 0.5"):
        RemoteScorer([replicas[0][1]], expected_config=replace(config, lam=0.5))
    with pytest.raises(ValueError, match="http://"):
        RemoteScorer(["127.0.0.1:1"])


def test_adrpo_config_with_scorer_remote_trains_on_the_replicas(replicas, tiny_chat_path, tmp_path):
    pytest.importorskip("trl")
    from train import adrpo

    url = replicas[1][1]
    before = httpx.get(f"{url}/health").json()["scored"]
    trainer, script, _ = adrpo.build([
        "--config", "configs/train/adrpo_smollm2_cpu.yaml", "--model_name_or_path", tiny_chat_path,
        "--output_dir", str(tmp_path), "--scorer", "remote", "--scorer_urls", url,
        "--env_overrides", json.dumps({**OVERRIDES, "alpha": 4.0, "lam": 0.8, "reward_density": 1}),
        "--users", "0-1", "--max_sessions_per_user", "2", "--max_completion_length", "8", "--use_cpu", "true",
        "--bf16", "false", "--gradient_checkpointing", "false", "--dtype", "float32", "--report_to", "none"])
    assert isinstance(trainer.session_reward.scorer, RemoteScorer)
    assert len(trainer.train_dataset) == 4 * 2 * 2  # 2 users x 2 sessions x 4 agents
    trainer.model.train()
    out = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    assert len(out["adrpo_weights"]) == trainer.args.generation_batch_size
    assert httpx.get(f"{url}/health").json()["scored"] > before
    with pytest.raises(SystemExit, match="scorer_urls"):
        adrpo.build(["--config", "configs/train/adrpo_smollm2_cpu.yaml", "--scorer", "remote",
                     "--model_name_or_path", tiny_chat_path, "--output_dir", str(tmp_path)])


def test_the_bench_writes_a_goal_of_a_mode_not_run_as_null():
    evidence = {"two_over_one": 1.7, "http_overhead_share": 0.2}
    assert remote_scoring_bench.goals({"evidence": evidence}) == {
        "http_overhead_share_choice_at_most_0.10": None,
        "two_over_one_at_least_1.6": {"evidence": True, "choice": None}}
    assert remote_scoring_bench.goals({"choice": {**evidence, "two_over_one": 1.2}}) == {
        "http_overhead_share_choice_at_most_0.10": False,
        "two_over_one_at_least_1.6": {"evidence": None, "choice": False}}
