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
