"""The reward audit (bench/reward_audit.py): the expert's edits made appends lose reward only where the reward tracks change."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import reward_audit  # noqa: E402


def test_audit_of_a_small_world(tmp_path):
    config = yaml.safe_load((ROOT / "configs/env/construction_cpu.yaml").read_text())
    config["world_overrides"] = {"num_users": 2, "rounds_update": 1, "num_periods": 3}
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "audit.json"
    reward_audit.main(["--env-config", str(path), "--users", "0-1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert out.with_suffix(".md").read_text().startswith(f"{result['sessions']} sessions")
    published, change = result["settings"]["published"], result["settings"]["tracks_change"]
    for edit in ("update_to_add", "replace_to_append", "both"):
        assert change["edits_lower_reward"][edit]["sessions"] > 0
        assert change["edits_lower_reward"][edit]["share"] == 1.0  # goal (a): every such session
        assert published["edits_lower_reward"][edit]["share"] == 0.0  # the published reward cannot tell
    for setting in (published, change):
        assert setting["per_period"]["0"]["noop"]["mean"] == 0.0  # a user's first period starts from nothing
        assert setting["overall"]["oracle_task"]["mean"] == 1.0  # the expert answers everything in both settings
        for rule, counts in setting["dominant"].items():
            assert sum(counts.values()) == result["sessions"], rule
    assert published["dominant"]["retrieval"]["semantic"] == result["sessions"]  # the published rule is a constant here
