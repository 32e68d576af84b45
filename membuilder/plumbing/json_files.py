"""JSON files in and out: guarded reads of files that may be hostile, and atomic writes.

Reading: a file of 100,000 nested brackets (200 KB) drives a recursive parser into ``RecursionError`` and
a streaming one (ijson, whose path prefixes grow with the depth) into memory that grows with the
square of the depth. ``DepthScanner`` reads the raw bytes first, in chunks, with numpy: it
tracks string state and bracket depth and stops at ``MAX_DEPTH`` before any parser sees the
input. Real benchmark and world files nest fewer than 10 levels.

- ``load_json_file(path)``: a whole ``.json`` / ``.json.gz`` file, at most ``MAX_JSON_BYTES``
  once decompressed;
- ``read_json(path)``: the same, a file that is no JSON being a ``ValueError`` naming it (for
  files users hand us: conversations, QA lists);
- ``GuardedReader(fh, source)``: wraps a binary file for a streaming parser (every ``read`` is
  scanned), so a 2.7 GB file is guarded at no extra pass.

Writing. Every file and folder MemGym writes for later runs to read is written beside its target
and renamed into place, so a run killed mid-write leaves the previous version, never half a file:

- ``atomic_write_bytes(path, data)``, ``atomic_write_text(path, text)``, ``write_json(path, data)``
  (indented, UTF-8): through ``<name>.tmp``, which no ``*.json`` glob picks up;
- ``atomic_dir(path)``: a folder filled inside a ``with`` block (a model checkpoint, a memory
  bank), swapped in with two renames; ``fsync=True`` makes the swap survive a power cut too.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

MAX_DEPTH = 200  # levels of [ and { at most
MAX_JSON_BYTES = 1 << 30  # a whole-file read (not a streamed one) at most, decompressed
_STEP = np.zeros(256, dtype=np.int64)  # +1 opens a level, -1 closes one
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_STRUCTURAL = bytes(1 if chr(b) in '"[]{}' else 0 for b in range(256))  # a bytes.translate table
QUOTE, BACKSLASH = ord('"'), ord("\\")


class JSONLimitError(ValueError):
    """A JSON input is nested too deeply or too large to read safely; the message names it."""


class DepthScanner:
    """Feeds on consecutive chunks of a JSON text and raises ``JSONLimitError`` once brackets
    outside strings nest deeper than ``max_depth``. Linear time, memory of one chunk: only the
    quote and bracket bytes are looked at one by one (in numpy)."""

    def __init__(self, source: str, max_depth: int = MAX_DEPTH):
        self.source, self.max_depth = source, max_depth
        self.depth, self.in_string, self.seen = 0, False, 0
        self.backslashes = 0  # the previous chunk ended with this many backslashes

    def feed(self, chunk: bytes) -> None:
        data = np.frombuffer(chunk, dtype=np.uint8)
        offset, self.seen = self.seen, self.seen + len(data)
        if not len(data):
            return
        at = np.flatnonzero(np.frombuffer(chunk.translate(_STRUCTURAL), dtype=np.uint8))
        carried, self.backslashes = self.backslashes, self._trailing_backslashes(data)
        if not len(at):
            return
        kinds = data[at]
        quotes = kinds == QUOTE
        # A quote after an odd run of backslashes is escaped (rare: looked at one by one).
        maybe = at[quotes & (data[np.maximum(at - 1, 0)] == BACKSLASH)]
        if carried and at[0] == 0 and kinds[0] == QUOTE:
            maybe = np.concatenate(([0], maybe))
        escaped = [q for q in dict.fromkeys(maybe.tolist()) if self._run_before(data, q, carried) % 2]
        if escaped:
            keep = ~np.isin(at, escaped)
            kinds, quotes = kinds[keep], quotes[keep]
        parity = (np.cumsum(quotes, dtype=np.int64) + self.in_string) & 1  # 1: inside a string (or its closing quote)
        steps = _STEP[kinds]
        steps[parity.astype(bool)] = 0
        if steps.any():
            depth = self.depth + np.cumsum(steps)
            over = np.flatnonzero(depth > self.max_depth)
            if len(over):
                where = offset + int(at[keep][over[0]] if escaped else at[over[0]])
                raise JSONLimitError(f"{self.source}: JSON nested deeper than {self.max_depth} levels "
                                     f"(at byte {where}); not a file this reader accepts")
            self.depth = int(depth[-1])
        if len(parity):
            self.in_string = bool(parity[-1])

    @staticmethod
    def _run_before(data, q: int, carried: int) -> int:
        j = q - 1
        while j >= 0 and data[j] == BACKSLASH:
            j -= 1
        return (q - 1 - j) + (carried if j < 0 else 0)

    def _trailing_backslashes(self, data) -> int:
        if data[-1] != BACKSLASH:
            return 0
        run = self._run_before(data, len(data), self.backslashes)
        return run


class GuardedReader:
    """A binary file whose every ``read`` passes through a ``DepthScanner`` (for ijson)."""

    def __init__(self, fh: BinaryIO, source: str, max_depth: int = MAX_DEPTH):
        self.fh, self.scanner = fh, DepthScanner(source, max_depth)

    def read(self, size: int = -1) -> bytes:
        chunk = self.fh.read(size)
        self.scanner.feed(chunk)
        return chunk


def check_depth(data: bytes, source: str, max_depth: int = MAX_DEPTH, chunk: int = 1 << 20) -> None:
    scanner = DepthScanner(source, max_depth)
    for start in range(0, len(data), chunk):
        scanner.feed(data[start:start + chunk])


def read_bytes(path: str | Path, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """A file's bytes (gunzipped for ``.gz``), refusing more than ``max_bytes``."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise JSONLimitError(f"{path}: over {max_bytes} bytes{' once decompressed' if opener is gzip.open else ''}; "
                             "too large to read whole")
    return data


def loads_guarded(data: bytes | str, source: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` after the depth check; ``JSONLimitError`` or ``json.JSONDecodeError`` /
    ``UnicodeDecodeError`` on bad input."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    check_depth(raw, source, max_depth)
    return json.loads(raw.decode("utf-8") if isinstance(data, bytes) else data)


def load_json_file(path: str | Path, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A whole JSON file (``.json`` or ``.json.gz``), depth- and size-checked first."""
    return loads_guarded(read_bytes(path, max_bytes), str(path), max_depth)


def read_json(path: str | Path) -> Any:
    """``load_json_file``, with a file that is not JSON (or not UTF-8) a ``ValueError`` naming it;
    ``JSONLimitError`` (a ``ValueError`` too) for one nested too deeply or too large."""
    try:
        return load_json_file(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` (its folder made if missing) through ``<name>.tmp``, renamed into
    place once complete: a crash mid-write leaves the previous file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """``atomic_write_bytes`` of ``text`` in UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, data: Any) -> Path:
    """``data`` as indented UTF-8 JSON (non-ASCII kept as is), written atomically."""
    return atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=1))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for root, _, files in os.walk(folder):
        for name in files:
            _fsync(Path(root) / name)
        _fsync(Path(root))


@contextlib.contextmanager
def atomic_dir(path: str | Path, fsync: bool = False) -> Iterator[Path]:
    """A new empty folder to fill inside the ``with`` block, swapped in for ``path`` when the block ends.

    The folder is ``.<name>.tmp-<token>`` beside ``path``. If the block raises, it is removed and
    ``path`` is untouched. Otherwise two renames swap it in: the old ``path`` (if any) is moved
    aside to ``.<name>.old-<token>``, the new folder takes its name, the old one is removed. A
    crash before the swap leaves ``path`` as it was; one between the renames leaves no ``path``
    but its previous content under the ``.old`` name (``left_aside`` finds it). Leftovers of
    earlier killed swaps are removed after a successful one. ``fsync``: the files, the folder and
    the rename are flushed to disk before the old copy goes."""
    path = Path(path)
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    tmp = parent / f".{path.name}.tmp-{token}"
    tmp.mkdir()
    try:
        yield tmp
        if fsync:
            _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = parent / f".{path.name}.old-{token}"
    if path.exists():
        os.rename(path, old)
    os.rename(tmp, path)
    if fsync:
        _fsync(parent)
    shutil.rmtree(old, ignore_errors=True)
    for stale in [*parent.glob(f".{path.name}.tmp-*"), *parent.glob(f".{path.name}.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)


def left_aside(path: str | Path) -> list[Path]:
    """Previous copies of ``path`` that an ``atomic_dir`` swap killed between its two renames left
    aside, newest first."""
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime, reverse=True)
