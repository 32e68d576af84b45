"""Two SFT stages read side by side from their ladders' work folders (the told world's committed caches)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from train.ladder.sft_compare import main

TOLD = Path("results/ladder-told/work")
KEEP_EMPTY = Path("results/ladder-keep-empty/work")


def _copy_sft(src: Path, dst: Path) -> None:
    (dst / "eval").mkdir(parents=True)
    shutil.copy(src / "settings.json", dst / "settings.json")
    shutil.copytree(src / "sft", dst / "sft")
    for name in ("sft.vllm.json", "sft-grounding.vllm.json"):
        shutil.copy(src / "eval" / name, dst / "eval" / name)


def test_an_sft_against_itself_pairs_to_zero_and_names_why_outputs_were_invalid(tmp_path):
    out = main([str(TOLD), str(TOLD), "--out", str(tmp_path / "same")])
    assert out["reward_second_minus_first"]["mean"] == 0 and out["reward_second_minus_first"]["n"] == 96
    assert all(f == {"to_valid": 0, "to_invalid": 0} for f in out["valid_flips"].values())
    first = out["first"]
    assert first["valid"]["core"]["k"] == 88 and first["valid"]["core"]["n"] == 96  # the told README's 0.92
    assert first["invalid"]["semantic"]["outputs"] == 8
    assert "UPDATE needs 'new_memory'" in first["invalid"]["semantic"]["reasons"][0]["reason"]
    assert first["conv26"]["windows"] == 137 and first["machine"]["amx"] is True
    assert first["conv26"]["dialogue_rate"] == pytest.approx(134 / 135)  # the dialogue-alone reading, not None
    assert out["interactive_second_minus_first"]["mean"] == 0 and out["interactive_second_minus_first"]["n"] == 60
    assert first["interactive"]["memory_accuracy"] == pytest.approx(26 / 60)  # the told README's 0.43 of 60
    md = (tmp_path / "same.md").read_text(encoding="utf-8")
    assert "+0.000" in md and "conv-26 (137 windows)" in md
    assert json.loads((tmp_path / "same.json").read_text(encoding="utf-8"))["shared_sessions"] == 96


def test_an_output_made_invalid_counts_as_one_session_turned_invalid(tmp_path):
    _copy_sft(TOLD, tmp_path / "b")
    path = tmp_path / "b" / "eval" / "sft.vllm.json"
    held = json.loads(path.read_text(encoding="utf-8"))
    key = next(k for k in held["session_keys"] if held["outputs"][k]["episodic"].startswith("{"))
    held["outputs"][key]["episodic"] = '{"operations": [{"action": "UPDATE", "old_memory": "x"}]}'
    path.write_text(json.dumps(held), encoding="utf-8")
    out = main([str(TOLD), str(tmp_path / "b")])
    assert out["valid_flips"]["episodic"] == {"to_valid": 0, "to_invalid": 1}
    assert out["second"]["valid"]["episodic"]["k"] == out["first"]["valid"]["episodic"]["k"] - 1


def test_folders_of_different_worlds_are_not_paired(tmp_path, capsys):
    out = main([str(TOLD), str(KEEP_EMPTY)])
    assert out["reward_second_minus_first"] is None and "env_config" in out["not_paired"][0]
    assert "not paired" in capsys.readouterr().out


def test_a_folder_without_an_sft_evaluation_is_named(tmp_path):
    with pytest.raises(SystemExit, match="cannot read an SFT evaluation"):
        main([str(TOLD), str(tmp_path)])


TOLD_AMD = Path("results/ladder-told-amd/work")


def test_interactive_figures_compared_across_machines_say_so(tmp_path, capsys):
    # the told recipe trained and evaluated on an AMX Xeon and again on an AMD EPYC: the held-out reward pairs to
    # about zero, the interactive accuracy does not, and the comparison names the two machines
    out = main([str(TOLD), str(TOLD_AMD)])
    assert out["reward_second_minus_first"]["ci"][0] < 0 < out["reward_second_minus_first"]["ci"][1]
    assert out["interactive_second_minus_first"]["ci"][0] > 0
    text = capsys.readouterr().out
    assert ("(above); trained on different machines (Intel Xeon (AMX), AMD EPYC (no AMX)) and evaluated where not "
            "recorded") in text and "conv-26: trained on different machines" in text
    main([str(TOLD_AMD), str(TOLD_AMD)])  # one machine: no note
    assert "different machines" not in capsys.readouterr().out
    # caches that record where they ran are read before the training sittings (both trained on the AMD machine)
    xeon = {"cpu": "Intel(R) Xeon(R) Processor", "amx": True, "avx512_bf16": True, "cores": 2}
    for name, where in (("a", {**xeon, "cpu": "AMD EPYC", "amx": False}), ("b", xeon)):
        _copy_sft(TOLD_AMD, tmp_path / name)
        memory = json.loads((TOLD_AMD / "eval" / "sft-memory.vllm.json").read_text(encoding="utf-8"))
        (tmp_path / name / "eval" / "sft-memory.vllm.json").write_text(json.dumps({**memory, "evaluated_on": where}),
                                                                        encoding="utf-8")
    main([str(tmp_path / "a"), str(tmp_path / "b")])
    assert "evaluated on different machines (AMD EPYC (no AMX), Intel Xeon (AMX))" in capsys.readouterr().out
