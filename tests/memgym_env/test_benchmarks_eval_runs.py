"""``memgym eval`` folders under interruption and misuse: a killed run, a rerun with other
settings, two runs at once, a cut-off ``items.jsonl``, nothing to evaluate. A tiny random Llama
answers and judges (real transformers code, nonsense answers), so each run takes seconds."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memgym_env.benchmarks.runner import EvalConfig, evaluate, out_lock
from memgym_env.cli import main as memgym

LOCOMO = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo10_conv-26.json"


def config(tmp_path, model: str, **overrides) -> EvalConfig:
    settings = dict(benchmark="locomo", data=str(LOCOMO), out=str(tmp_path / "run"), system="oracle-evidence",
                    answerer=model, judge=model, limit=2, answer_max_tokens=4, judge_max_tokens=4,
                    judge_check=False, batch_size=1)
    return EvalConfig(**{**settings, **overrides})


def test_an_interrupted_run_refuses_other_settings_and_resumes_with_the_same(tmp_path, tiny_chat_path):
    cfg = config(tmp_path, tiny_chat_path, limit=60, answer_max_tokens=48)
    script = (f"from memgym_env.benchmarks.runner import EvalConfig, evaluate\n"
              f"evaluate(EvalConfig(**{cfg.__dict__!r}), quiet=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "HF_HUB_OFFLINE": "1"})
    items = Path(cfg.out) / "items.jsonl"
    deadline = time.time() + 120
    while not (items.exists() and items.read_text().count("\n") >= 1) and time.time() < deadline:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with pytest.raises(ValueError, match="another configuration .*answer_max_tokens: 48 there, 12 now"):
        evaluate(config(tmp_path, tiny_chat_path, limit=60, answer_max_tokens=12), quiet=True)
    kept = {json.loads(line)["id"] for line in items.read_text().splitlines() if line.strip().endswith("}")}
    evaluate(config(tmp_path, tiny_chat_path, limit=len(kept) + 1, answer_max_tokens=48), quiet=True)
    run = json.loads((Path(cfg.out) / "results.json").read_text())["run"]
    assert run["questions"] == len(kept) + 1 and run["invocations"][-1]["items_reused"] == len(kept)


def test_items_without_a_run_record_are_refused(tmp_path, tiny_chat_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "items.jsonl").write_text('{"id": "conv-26/qa0"}\n')
    with pytest.raises(ValueError, match="run.json is missing, so their configuration is unknown"):
        evaluate(config(tmp_path, tiny_chat_path), quiet=True)


def test_a_second_run_on_a_folder_in_use_is_refused_with_its_holder(tmp_path, tiny_chat_path):
    cfg = config(tmp_path, tiny_chat_path)
    Path(cfg.out).mkdir()
    with out_lock(Path(cfg.out)):
        with pytest.raises(ValueError, match=f"being written by another memgym eval \\(pid {os.getpid()} on "):
            evaluate(cfg, quiet=True)
    evaluate(cfg, quiet=True)  # the lock ends with its holder
    assert json.loads((Path(cfg.out) / "run.json").read_text())["questions"] == 2


def test_a_cut_off_last_line_is_dropped_with_a_warning_naming_the_file(tmp_path, tiny_chat_path, caplog):
    cfg = config(tmp_path, tiny_chat_path)
    evaluate(cfg, quiet=True)
    items = Path(cfg.out) / "items.jsonl"
    lines = items.read_text().splitlines()
    items.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    with caplog.at_level(logging.WARNING, logger="memgym.eval"):
        evaluate(cfg, quiet=True)
    assert f"{items}: line 2 is cut off" in caplog.text
    assert [json.loads(line)["id"] for line in items.read_text().splitlines()] == ["conv-26/qa0", "conv-26/qa1"]


def test_a_damaged_line_inside_items_names_file_and_line(tmp_path, tiny_chat_path):
    cfg = config(tmp_path, tiny_chat_path)
    evaluate(cfg, quiet=True)
    items = Path(cfg.out) / "items.jsonl"
    lines = items.read_text().splitlines()
    items.write_text("{oops\n" + lines[1] + "\n")
    with pytest.raises(ValueError, match=f"{items}, line 1: damaged"):
        evaluate(cfg, quiet=True)


@pytest.mark.parametrize("data", ["[]", '[{"sample_id": "s", "conversation": {"speaker_a": "A", "speaker_b": "B"}, "qa": []}]',
                                  '[{"sample_id": "s", "conversation": {}, "qa": [{"question": 5}]}]'])
def test_a_run_with_no_questions_exits_non_zero(tmp_path, data, capsys):
    path = tmp_path / "locomo.json"
    path.write_text(data)
    code = memgym(["eval", "--benchmark", "locomo", "--data", str(path), "--out", str(tmp_path / "out"),
                   "--system", "oracle-evidence", "--skip-bad"])
    assert code != 0
    assert f"{path}: no questions to evaluate" in capsys.readouterr().err
