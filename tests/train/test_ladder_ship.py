"""Which adapter the ladder ships: the first seed of the best pooled stage whose weights are on this machine, since a
stage trained on another machine comes with its caches and not its weights."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from train.ladder.run import ship_best  # noqa: E402
from train.ladder.settings import parse_args  # noqa: E402


def _row(stage: str, seed: int, reward: float) -> dict:
    return {"stage": stage, "seed": seed, "reward_evidence": reward, "valid_rate": {}, "reward_evidence_ci": [0, 1],
            "memory_score": None, "memory_score_ci": None, "held_out_sessions": 96, "held_out_users": ["9"]}


def _adapter(folder, value: float) -> None:
    folder.mkdir(parents=True)
    save_file({"lora_A": torch.full((2, 2), value)}, folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/elsewhere/smollm2"}))


def test_the_best_stage_ships_from_the_first_seed_whose_adapter_is_here(tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "shipped"
    a = parse_args(["--config", "configs/train/ladder_smollm2_cpu.yaml", "--work_dir", str(work),
                    "--results_dir", str(tmp_path / "results"), "--adapter_out", str(out)])
    _adapter(work / "sft" / "policy" / "adapter", 0.0)
    _adapter(work / "seed1" / "grpo" / "policy" / "adapter", 1.0)  # seed 0 was trained on another machine
    rows = [_row("base", 0, 0.0), _row("sft", 0, 0.5), _row("grpo", 0, 0.6), _row("grpo", 1, 0.58)]
    assert ship_best(a, work, rows, []) == out
    card = json.loads((out / "card.json").read_text())
    assert (card["stage"], card["seed"]) == ("grpo", 1) and card["pooled"] == {"sft": 0.5, "grpo": 0.59}
    assert "seed 1" in card["what"] and card["held_out"]["reward_evidence"] == 0.58
    shipped = load_file(out / "adapter_model.safetensors")["lora_A"]
    assert shipped.dtype == torch.bfloat16 and shipped.float().eq(1.0).all()
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == a.model_name_or_path
    assert ship_best(a, work, rows, []) is None  # the same choice: nothing exported again

    # the leading stage has no adapter here at all: nothing is shipped, the last shipped policy stays, and it says why
    rows.append(_row("adrpo", 0, 0.9))
    assert ship_best(a, work, rows, []) is None
    assert "not shipped: adrpo leads the pooled held-out reward" in capsys.readouterr().out
    assert json.loads((out / "card.json").read_text())["stage"] == "grpo"


def test_the_card_says_whether_the_shipped_stage_is_told_apart_from_sft(tmp_path):
    """The card pairs the shipped RL stage with SFT session by session, pooled over its seeds, so a lead smaller
    than the spread between seeds reads as such rather than as a better policy."""
    work, out = tmp_path / "work", tmp_path / "shipped"
    a = parse_args(["--config", "configs/train/ladder_smollm2_cpu.yaml", "--work_dir", str(work),
                    "--results_dir", str(tmp_path / "results"), "--adapter_out", str(out)])
    _adapter(work / "seed0" / "grpo" / "policy" / "adapter", 1.0)
    sessions = [f"u/p{i}" for i in range(24)]
    sft = {k: 0.5 + 0.02 * (i % 5) for i, k in enumerate(sessions)}

    def with_sessions(stage, seed, shift):
        values = {k: v + shift[i % len(shift)] for i, (k, v) in enumerate(sft.items())}
        return {**_row(stage, seed, sum(values.values()) / len(values)), "session_reward_evidence": values}

    rows = [{**_row("sft", 0, 0.54), "session_reward_evidence": sft},
            with_sessions("grpo", 0, [0.3, -0.28]), with_sessions("grpo", 1, [-0.29, 0.31])]
    ship_best(a, work, rows, [])
    card = json.loads((out / "card.json").read_text())
    assert card["stage"] == "grpo" and card["against_sft"]["reads"] == "zero inside"
    assert card["against_sft"]["n_seeds"] == 2 and card["against_sft"]["n_sessions"] == 24
    assert "not told apart from SFT" in card["why"]

    rows = [rows[0], with_sessions("grpo", 0, [0.05, 0.07]), with_sessions("grpo", 1, [0.06, 0.04])]
    (out / "card.json").unlink()
    ship_best(a, work, rows, [])
    card = json.loads((out / "card.json").read_text())
    assert card["against_sft"]["reads"] == "above" and card["against_sft"]["ci"][0] > 0
    assert "not told apart" not in card["why"] and "+0.055" in card["why"]
