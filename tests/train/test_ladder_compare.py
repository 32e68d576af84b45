"""train/ladder/compare.py: an ablation's RL rows against the ladder it took its SFT stage from."""

from __future__ import annotations

import json

import pytest

from train.ladder import compare as ladder_compare

KEYS = [f"u/p0-s{i}" for i in range(12)]
SPREAD = [0.0, 0.5, 1.0] * 4  # sessions differ a lot; each stage adds its shift to every one


def _row(stage, seed, shift, alpha=None):
    per = {k: round(v + shift, 4) for k, v in zip(KEYS, SPREAD, strict=True)}
    mean = round(sum(per.values()) / len(per), 4)
    return {"stage": stage, "seed": seed, "alpha": alpha, "reward_evidence": mean,
            "reward_evidence_ci": [round(mean - 0.25, 4), round(mean + 0.25, 4)], "session_reward_evidence": per}


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    return path


def test_an_ablation_is_paired_with_the_ladder_it_started_from(tmp_path, capsys):
    base, sft = _row("base", 0, -0.5), _row("sft", 0, 0.0)
    main = _write(tmp_path / "ladder.json", [base, sft, _row("adrpo", 0, 0.1, 4.0), _row("grpo", 0, 0.2, 1.0),
                                             _row("adrpo", 1, 0.0, 4.0)])
    ablation = _write(tmp_path / "alpha2" / "ladder.json", [base, sft, _row("adrpo", 0, 0.3, 2.0)])
    result = ladder_compare.main([str(main), str(ablation), "--out", str(tmp_path / "out" / "compare")])
    names = [r["name"] for r in result["rows"]]
    assert names == ["ADRPO (alpha 4) seed 0", "GRPO (alpha 1) seed 0", "ADRPO (alpha 4) seed 1",
                     "ADRPO (alpha 2) seed 0"]
    # the shift each stage adds shows exactly once paired: the sessions' spread cancels
    assert [r["minus_sft"]["mean"] for r in result["rows"]] == pytest.approx([0.1, 0.2, 0.0, 0.3])
    assert [r["minus_sft"]["reads"] for r in result["rows"]] == ["above", "above", "zero inside", "above"]
    pairs = {(p["a"], p["b"]): p["a_minus_b"]["mean"] for p in result["pairs"]}
    assert pairs == pytest.approx({("GRPO (alpha 1) seed 0", "ADRPO (alpha 4) seed 0"): 0.1,
                                   ("ADRPO (alpha 2) seed 0", "ADRPO (alpha 4) seed 0"): 0.2,
                                   ("ADRPO (alpha 2) seed 0", "GRPO (alpha 1) seed 0"): 0.1})  # seed 1 pairs nothing
    printed = capsys.readouterr().out
    assert "ADRPO (alpha 2) seed 0 - ADRPO (alpha 4) seed 0, paired: +0.200 [0.200, 0.200] over 12 sessions (above)" \
        in printed
    assert json.loads((tmp_path / "out" / "compare.json").read_text()) == json.loads(json.dumps(result))
    md = (tmp_path / "out" / "compare.md").read_text()
    assert [x[2:] for x in md.splitlines() if x.startswith("- ")] == printed.strip().splitlines()


def test_ladders_that_do_not_share_their_sft_stage_are_refused(tmp_path):
    sft = _row("sft", 0, 0.0)
    main = _write(tmp_path / "ladder.json", [sft, _row("adrpo", 0, 0.1, 4.0)])
    other = _write(tmp_path / "other.json", [_row("sft", 0, 0.05), _row("adrpo", 0, 0.3, 2.0)])
    with pytest.raises(SystemExit, match="do not share an SFT stage"):
        ladder_compare.main([str(main), str(other)])
    twice = _write(tmp_path / "twice.json", [sft, _row("adrpo", 0, 0.1, 4.0)])
    with pytest.raises(SystemExit, match=r"ADRPO \(alpha 4\) seed 0 is also in"):
        ladder_compare.main([str(main), str(twice)])
    old = _write(tmp_path / "old.json", [sft, _row("adrpo", 0, 0.1)])
    with pytest.raises(SystemExit, match="has no alpha.*--report_only true"):
        ladder_compare.main([str(old)])
    with pytest.raises(SystemExit, match="no sft row"):
        ladder_compare.main([str(_write(tmp_path / "early.json", [_row("base", 0, 0.0)]))])
    with pytest.raises(SystemExit, match="no such ladder.json"):
        ladder_compare.main([str(tmp_path / "missing.json")])


def test_a_per_agent_credit_ablation_is_its_own_row_beside_the_joint_one(tmp_path):
    """Same stage, alpha and seed, another credit: a row of its own, named by its credit, paired with the joint run."""
    sft = _row("sft", 0, 0.0)
    main = _write(tmp_path / "ladder.json", [sft, {**_row("grpo", 0, 0.1, 1.0), "credit": "joint"}])
    credit = _write(tmp_path / "credit" / "ladder.json", [sft, {**_row("grpo", 0, 0.25, 1.0), "credit": "per_agent"}])
    result = ladder_compare.main([str(main), str(credit)])
    assert [r["name"] for r in result["rows"]] == ["GRPO (alpha 1) seed 0", "GRPO (alpha 1), per-agent credit seed 0"]
    (pair,) = result["pairs"]
    assert pair["a"] == "GRPO (alpha 1), per-agent credit seed 0" and pair["a_minus_b"]["mean"] == pytest.approx(0.15)
