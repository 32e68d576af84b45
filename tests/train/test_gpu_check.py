"""`scripts/gpu_check.py --size 4b`, cut down to run on the CPU, so the GPU script cannot rot.

The cut-down keeps Qwen3-4B's vocabulary (151,936) and head layout (32 query and 8 key/value heads
of 128) and shrinks what a CPU cannot afford: 2 layers, hidden 256, G = 2 and 8 rows a step (the
recipe's 32 rows of ~1,200-token prompts take minutes a step on two cores), one ADRPO step and the
full-length loss step. The stock GRPO run is left out: off a Triton device TRL's fused log-prob head
scores every prompt position against the 151,936-token vocabulary, minutes a step on two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_4b_check_cut_down_on_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    cmd = [sys.executable, "scripts/gpu_check.py", "--size", "4b", "--device", "cpu", "--layers", "2",
           "--hidden", "256", "--prompt-length", "64", "--completion-length", "16", "--generations", "2",
           "--micro-batch", "2", "--accumulation", "4", "--steps", "1", "--runs", "adrpo", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    model = report["model"]
    assert (model["vocab"], model["heads"], model["kv_heads"], model["head_dim"]) == (151_936, 32, 8, 128)
    assert (model["layers"], model["hidden"], model["cut_down"]) == (2, 256, True)
    assert report["generation"].startswith("transformers") and "length limit" in report["note"]
    assert report["settings"]["beta"] == 0.02 and report["settings"]["gradient_checkpointing"] is True
    assert "grpo" not in report
    for name in ("adrpo",):
        (step,) = report[name]["steps"]
        assert step["rows"] == 8 and step["completion_width"] == 16
        # the instructions set the prompt's floor; the byte tokenizer makes them ~1,200 tokens
        assert step["prompt_width"] >= report["settings"]["prompt_instruction_floor"] > 500
        assert step["step_s"] >= step["generate_s"] + step["optimise_s"] - 0.05
        assert step["completion_tokens"] <= 8 * 16
    full = report["adrpo_full_length_step"]
    assert (full["prompt_tokens"], full["completion_tokens"], full["rows"], full["micro_batches"]) == (64, 16, 8, 4)
    est = report["memory_estimate_full_length_step"]
    assert est["run"]["prompt_tokens"] == 64 and est["params"] == model["params"]
    assert est["bytes"]["logits"] == 2 * 16 * 151_936 * 12          # micro-batch 2 x 16 tokens x vocab x 12 bytes
    assert report["estimate_vs_measured"] is None                     # no CUDA peak to compare with on a CPU
    table = out.with_suffix(".md").read_text()
    assert "| adrpo | 1 |" in table and "Full-length ADRPO step" in table
