"""Benchmark and world files built to hurt: deep nesting, oversized input, wrongly typed fields.
Each fault is one error naming the file (and the record and field where there is one)."""

from __future__ import annotations

import gzip
import subprocess
import sys
import textwrap

import pytest

from memgym_env.benchmarks import BadRecordError
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
        from memgym_env.benchmarks import BadRecordError
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
