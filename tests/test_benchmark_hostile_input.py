"""Benchmark and world files built to hurt: deep nesting, oversized input, wrongly typed fields.
Each fault is one error naming the file (and the record and field where there is one)."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memgym_env.benchmarks import BadRecordError, Problems
from memgym_env.benchmarks.locomo import read_locomo
from memgym_env.benchmarks.longmemeval import read_longmemeval
from memgym_env.safe_json import DepthScanner, JSONLimitError, check_depth, load_json_file
from memgym_env.world.data_json import read_world
from memgym_env.world.types import WorldError

NESTED = "[" * 100_000 + "]" * 100_000  # 200 KB


def test_deeply_nested_longmemeval_fails_fast_under_a_memory_limit(tmp_path):
    path = tmp_path / "longmemeval_s.json"
    path.write_text(NESTED)
    script = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from memgym_env.benchmarks import BadRecordError, Problems
        from memgym_env.benchmarks.longmemeval import read_longmemeval
        try:
            read_longmemeval({str(path)!r})
        except BadRecordError as exc:
            print("ERROR", exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.startswith(f"ERROR {path}: JSON nested deeper than")


def test_deeply_nested_locomo_is_one_error_naming_the_file(tmp_path):
    path = tmp_path / "locomo.json"
    path.write_text(NESTED)
    with pytest.raises(BadRecordError, match=f"{path}: JSON nested deeper than 200 levels"):
        read_locomo(path)


def test_deeply_nested_gzip_is_caught_too(tmp_path):
    path = tmp_path / "longmemeval_s.json.gz"
    path.write_bytes(gzip.compress(NESTED.encode()))
    with pytest.raises(BadRecordError, match="nested deeper"):
        read_longmemeval(path)


def test_deeply_nested_world_is_a_world_error(tmp_path):
    path = tmp_path / "world.json"
    path.write_text(NESTED)
    with pytest.raises(WorldError, match=f"{path}: JSON nested deeper"):
        read_world(path)


def test_brackets_inside_strings_and_escaped_quotes_do_not_count():
    text = '[{"a": "' + "[" * 500 + '\\" [[[ \\\\", "b": "\\\\\\"{{{{"}]'
    check_depth(text.encode(), "x", max_depth=3)
    scanner = DepthScanner("x", max_depth=3)
    for i in range(0, len(text), 3):  # chunk edges fall inside escapes
        scanner.feed(text[i:i + 3].encode())
    assert scanner.depth == 0 and not scanner.in_string


def test_depth_limit_is_exact():
    check_depth(b"[" * 5 + b"]" * 5, "x", max_depth=5)
    with pytest.raises(JSONLimitError, match="at byte 5"):
        check_depth(b"[" * 6 + b"]" * 6, "x", max_depth=5)


def test_a_whole_file_read_is_size_limited(tmp_path):
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(b"[" + b"0," * 5000 + b"0]"))
    with pytest.raises(JSONLimitError, match="once decompressed"):
        load_json_file(path, max_bytes=1000)


# ---- wrongly typed fields: one error naming file, record and field; --skip-bad skips the record ----
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _locomo(tmp_path, change):
    sample = json.loads((DATA / "locomo" / "locomo10_conv-26.json").read_text())
    sample = sample[0] if isinstance(sample, list) else sample
    change(sample)
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    return path


LOCOMO_FAULTS = {
    "session_1[0]: field 'text' must be text": lambda s: s["conversation"]["session_1"][0].update(text=5),
    "qa[0]: field 'adversarial_answer' must be text or a number": lambda s: s["qa"][0].update(adversarial_answer=["x"]),
    "sample conv-26: field 'speaker_a' must be text": lambda s: s["conversation"].update(speaker_a=["x"]),
    "field 'session_1_date_time' must be text": lambda s: s["conversation"].update(session_1_date_time=5),
    "qa[0]: 'evidence' is not a list of turn ids": lambda s: s["qa"][0].update(evidence=[["D1:3"]]),
}


@pytest.mark.parametrize("message", list(LOCOMO_FAULTS))
def test_wrongly_typed_locomo_fields_are_named_and_skippable(tmp_path, message):
    path = _locomo(tmp_path, LOCOMO_FAULTS[message])
    with pytest.raises(BadRecordError, match=re.escape(f"LoCoMo file {path}, ") + ".*" + re.escape(message)):
        read_locomo(path)
    problems = Problems(skip_bad=True)
    read_locomo(path, problems)
    assert problems.count == 1 and message in problems.messages[0]


LONGMEMEVAL_FAULTS = {
    "field 'answer_session_ids' must be a list of session ids": lambda r: r.update(answer_session_ids=5),
    "haystack_session_ids[0]: must be text": lambda r: r.update(haystack_session_ids=[["x"]] * len(r["haystack_dates"])),
    "haystack_dates[0]: must be text": lambda r: r.update(haystack_dates=[5] * len(r["haystack_dates"])),
    "field 'question_date' must be text": lambda r: r.update(question_date=["x"]),
}


@pytest.mark.parametrize("message", list(LONGMEMEVAL_FAULTS))
def test_wrongly_typed_longmemeval_fields_are_named_and_skippable(tmp_path, message):
    records = json.loads((DATA / "longmemeval" / "longmemeval_oracle_sample.json").read_text())[:2]
    LONGMEMEVAL_FAULTS[message](records[0])
    path = tmp_path / "longmemeval_oracle.json"
    path.write_text(json.dumps(records))
    with pytest.raises(BadRecordError, match=re.escape(f"LongMemEval file {path}, question {records[0]['question_id']}")
                       + ".*" + re.escape(message)):
        read_longmemeval(path)
    problems = Problems(skip_bad=True)
    assert [c.id for c in read_longmemeval(path, problems)] == [records[1]["question_id"]]
    assert problems.count == 1
