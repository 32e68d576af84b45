"""The training ladder end to end on a tiny random model: every stage, both seeds, held-out users, resume."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from membuilder.ops import AGENTS  # noqa: E402
from membuilder.training.tiny import byte_tokenizer, tiny_llama  # noqa: E402


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    tok = byte_tokenizer()
    tiny_llama(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _argv(tiny_path, tmp_path):
    return ["--config", "configs/train/ladder_smollm2_cpu.yaml", "--model_name_or_path", tiny_path,
            "--choice_answerer", tiny_path,
            "--env_overrides", '{"world_config": "configs/env/base.yaml", "world_overrides": {"num_users": 4}}',
            "--train_users", "0-1", "--held_out_users", "3",
            "--train_sessions_per_user", "1", "--eval_sessions_per_user", "2", "--seeds", "0", "1",
            "--sft_epochs", "1", "--rl_steps", "1", "--rl_generations", "2", "--eval_max_new_tokens", "16",
            "--work_dir", str(tmp_path / "work"), "--results_dir", str(tmp_path / "results")]


def test_ladder_writes_every_stage_for_every_seed_and_resumes(tiny_path, tmp_path, monkeypatch):
    from memgym_env.world import generate_world, load_config
    from train import ladder

    monkeypatch.setenv("MEMGYM_TORCH_THREADS", "1")
    rows = ladder.main(_argv(tiny_path, tmp_path))
    saved = json.loads((tmp_path / "results" / "ladder.json").read_text())
    assert saved == json.loads(json.dumps(rows))
    assert sorted((r["stage"], r["seed"]) for r in saved) == sorted(
        (s, seed) for s in ("base", "sft", "grpo", "adrpo") for seed in (0, 1))
    world = generate_world(load_config("configs/env/base.yaml", overrides={"num_users": 4}))
    held_out = {world[3].id}
    for r in saved:
        assert set(r["valid_rate"]) == set(AGENTS)
        assert all(0.0 <= v <= 1.0 for v in r["valid_rate"].values())
        assert 0.0 <= r["reward_evidence"] <= 1.0 and 0.0 <= r["reward_choice"] <= 1.0
        assert set(r["held_out_users"]) == held_out and r["held_out_sessions"] == 2
    # the base row is evaluated once (greedy decoding does not depend on the training seed)
    base = [r for r in saved if r["stage"] == "base"]
    assert base[0]["valid_rate"] == base[1]["valid_rate"]
    assert (tmp_path / "results" / "ladder.png").stat().st_size > 10_000
    assert "| adrpo |" in (tmp_path / "results" / "ladder.md").read_text()
    # SFT never saw the held-out user's sessions
    sft_rows = [json.loads(x) for x in (tmp_path / "work" / "seed0" / "sft" / "sft_rows.jsonl").read_text().splitlines()]
    assert sft_rows and {r["session_key"].split("/")[0] for r in sft_rows} == {world[0].id, world[1].id}

    # a rerun resumes: no stage is trained or evaluated again
    done = [tmp_path / "work" / "seed1" / "adrpo" / "policy" / "merged", *(tmp_path / "work" / "eval").glob("*.json")]
    stamps = [p.stat().st_mtime_ns for p in done]
    again = ladder.main(_argv(tiny_path, tmp_path))
    assert again == rows and [p.stat().st_mtime_ns for p in done] == stamps
