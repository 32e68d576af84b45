"""Atomic saves: a writer killed mid-save never costs the previous bank."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from membuilder.memory import EmbeddingCache, Entry, MemoryBank

WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from membuilder.memory import EmbeddingCache, Entry, MemoryBank

    path, n = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((n, 384)).astype("float32")
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    bank = MemoryBank(cache=EmbeddingCache(dim=384))
    types = ("episodic", "semantic", "procedural")
    bank.add_entries([Entry(f"e{i}", types[i % 3], f"entry {i}") for i in range(n)], vecs)
    version = 0
    while True:
        version += 1
        bank.core.rewrite(f"version {version}")
        bank.save(path)
        print(f"saved {version}", flush=True)
    """
)


def _bank_version(path: Path) -> int:
    bank = MemoryBank.load(path, cache=EmbeddingCache(dim=384))
    assert len(bank) == 30_000  # every entry of the bank is there, not a partial file
    return int(bank.core.text.split()[1])


@pytest.mark.parametrize("attempt", range(3))
def test_writer_killed_mid_save_leaves_previous_bank_intact(tmp_path, attempt):
    path = tmp_path / "bank"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "30000"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("saved 1"), line
        # Wait for the next save to be under way (its temporary folder exists), then kill it.
        deadline = time.time() + 60
        while not list(tmp_path.glob(".bank.tmp-*")):
            assert time.time() < deadline, "writer never started a second save"
        time.sleep(attempt * 0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _bank_version(path) >= 1


def test_crash_between_the_two_renames_is_recovered(tmp_path):
    cache = EmbeddingCache(dim=4)
    bank = MemoryBank(cache=cache)
    bank.add_entries([Entry("a", "semantic", "alpha")], np.eye(4, dtype=np.float32)[:1])
    bank.core.rewrite("kept")
    path = bank.save(tmp_path / "bank")
    # The state a save leaves if killed after moving the old folder aside, before moving the new one in.
    path.rename(tmp_path / ".bank.old-deadbeef")
    (tmp_path / ".bank.tmp-deadbeef").mkdir()
    loaded = MemoryBank.load(tmp_path / "bank", cache=cache)
    assert loaded.core.text == "kept" and [e.id for e in loaded.entries()] == ["a"]
    # The next save cleans up the leftovers.
    loaded.save(tmp_path / "bank")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bank"]
