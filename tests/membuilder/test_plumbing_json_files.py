"""membuilder.plumbing.json_files: atomic writes that a crash cannot half-do, guarded reads that name the file."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from membuilder.plumbing.json_files import (
    JSONLimitError,
    atomic_dir,
    atomic_write_bytes,
    atomic_write_text,
    left_aside,
    read_json,
    write_json,
)

ROOT = Path(__file__).resolve().parents[2]

# Writes 1 MB under a 64 KB file-size limit. With SIGXFSZ's default action the kernel kills the writer in
# the middle of the write, a real crash at the worst moment, with part of the new bytes on disk; with the
# signal ignored (Python's own setting) the write fails with EFBIG instead, as on a full disk.
CUT_SHORT = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    from membuilder.plumbing.json_files import atomic_write_bytes

    path, how, crash = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "killed"
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL if crash else signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
    data = b"new " * (1 << 18)
    if how == "atomic":
        atomic_write_bytes(path, data)
    else:
        path.write_bytes(data)
    """
)


def _write_cut_short(path: Path, how: str, crash: str = "killed") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CUT_SHORT, str(path), how, crash], cwd=ROOT,
                          capture_output=True, text=True)


def test_write_json_writes_indented_utf8_and_leaves_no_temporary_file(tmp_path):
    path = write_json(tmp_path / "run" / "run.json", {"user": "Zoë", "periods": [1, 2]})
    assert path.read_text(encoding="utf-8") == '{\n "user": "Zoë",\n "periods": [\n  1,\n  2\n ]\n}'
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]


def test_a_writer_killed_mid_write_leaves_the_previous_file_intact(tmp_path):
    path = tmp_path / "results.json"
    write_json(path, {"version": 1})
    assert _write_cut_short(path, "atomic").returncode == -signal.SIGXFSZ
    assert json.loads(path.read_text(encoding="utf-8")) == {"version": 1}
    assert (tmp_path / "results.json.tmp").stat().st_size == 1 << 16  # the killed write got this far
    # the next write goes through, over the temporary file the killed one left
    write_json(path, {"version": 2})
    assert json.loads(path.read_text(encoding="utf-8")) == {"version": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_a_plain_write_killed_the_same_way_leaves_half_a_file(tmp_path):
    """Why the atomic write exists: the same crash, without it, destroys the previous file."""
    path = tmp_path / "results.json"
    write_json(path, {"version": 1})
    assert _write_cut_short(path, "plain").returncode == -signal.SIGXFSZ
    assert path.read_bytes() == b"new " * (1 << 14)  # 64 KB of the new content, none of the old


def test_a_write_that_fails_keeps_the_previous_file_and_removes_its_temporary_one(tmp_path):
    path = tmp_path / "results.json"
    write_json(path, {"version": 1})
    run = _write_cut_short(path, "atomic", crash="error")
    assert run.returncode == 1 and "OSError: [Errno 27] File too large" in run.stderr
    assert json.loads(path.read_text(encoding="utf-8")) == {"version": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_atomic_write_bytes_and_text_replace_the_file_whole(tmp_path):
    path = tmp_path / "vectors.npy"
    atomic_write_bytes(path, b"\x93NUMPY old")
    atomic_write_bytes(path, b"\x93NUMPY")
    assert path.read_bytes() == b"\x93NUMPY"
    assert atomic_write_text(tmp_path / "log.jsonl", "é\n").read_bytes() == "é\n".encode()


def _folder(path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text, encoding="utf-8")


def _contents(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): p.read_text(encoding="utf-8") for p in sorted(path.rglob("*")) if p.is_file()}


def test_atomic_dir_swaps_the_new_folder_in_and_removes_the_old(tmp_path):
    target = tmp_path / "policy"
    with atomic_dir(target) as tmp:
        _folder(tmp, {"adapter_config.json": "old"})
    with atomic_dir(target, fsync=True) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".policy.tmp-")
        _folder(tmp, {"adapter_config.json": "new", "tokenizer/vocab.json": "{}"})
        assert _contents(target) == {"adapter_config.json": "old"}  # untouched until the block ends
    assert _contents(target) == {"adapter_config.json": "new", "tokenizer/vocab.json": "{}"}
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]


def test_a_failed_atomic_dir_block_keeps_the_old_folder_and_removes_its_own(tmp_path):
    target = tmp_path / "policy"
    with atomic_dir(target) as tmp:
        _folder(tmp, {"weights": "old"})
    with pytest.raises(RuntimeError, match="wrote no files"):
        with atomic_dir(target) as tmp:
            _folder(tmp, {"weights": "half"})
            raise RuntimeError("building checkpoint 'x' wrote no files")
    assert _contents(target) == {"weights": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]


KILLED_IN_BLOCK = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from membuilder.plumbing.json_files import atomic_dir

    with atomic_dir(Path(sys.argv[1])) as tmp:
        (tmp / "weights").write_text("half", encoding="utf-8")
        os.kill(os.getpid(), 9)
    """
)


def test_a_process_killed_inside_atomic_dir_leaves_the_old_folder_and_the_next_swap_cleans_up(tmp_path):
    target = tmp_path / "sft"
    with atomic_dir(target) as tmp:
        _folder(tmp, {"weights": "old"})
    run = subprocess.run([sys.executable, "-c", KILLED_IN_BLOCK, str(target)], cwd=ROOT)
    assert run.returncode == -signal.SIGKILL
    assert _contents(target) == {"weights": "old"}
    assert len(list(tmp_path.glob(".sft.tmp-*"))) == 1  # the killed copy, never taken for the stage
    with atomic_dir(target) as tmp:
        _folder(tmp, {"weights": "new"})
    assert _contents(target) == {"weights": "new"}
    assert [p.name for p in tmp_path.iterdir()] == ["sft"]


def test_left_aside_finds_the_old_folder_of_a_swap_killed_between_its_renames(tmp_path):
    target = tmp_path / "bank"
    with atomic_dir(target) as tmp:
        _folder(tmp, {"bank.json": "kept"})
    # the state a swap leaves if killed after moving the old folder aside, before moving the new one in
    os.rename(target, tmp_path / ".bank.old-deadbeef")
    assert [p.name for p in left_aside(target)] == [".bank.old-deadbeef"]
    assert _contents(left_aside(target)[0]) == {"bank.json": "kept"}
    assert left_aside(tmp_path / "other") == []


def test_read_json_reads_plain_and_gzipped_files(tmp_path):
    (tmp_path / "qa.json").write_text('[{"id": "q1"}]', encoding="utf-8")
    with gzip.open(tmp_path / "qa.json.gz", "wt", encoding="utf-8") as f:
        f.write('[{"id": "q1"}]')
    assert read_json(tmp_path / "qa.json") == read_json(tmp_path / "qa.json.gz") == [{"id": "q1"}]


def test_read_json_names_the_file_that_is_not_json(tmp_path):
    path = tmp_path / "qa.json"
    path.write_text('[{"id": "q1"},', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}: not valid JSON \(Expecting value"):
        read_json(path)
    path.write_bytes(b'["caf\xe9"]')  # Latin-1, not UTF-8
    with pytest.raises(ValueError, match=rf"{path}: not valid JSON \('utf-8' codec"):
        read_json(path)


def test_read_json_refuses_a_file_nested_deeper_than_any_real_one(tmp_path):
    path = tmp_path / "conversation.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(JSONLimitError, match=rf"{path}: JSON nested deeper than 200 levels"):
        read_json(path)
