"""Shared plumbing of the benchmark readers: opening .json / .json.gz files and bad records.

Every reader reports a malformed record through a ``Problems`` collector. By default the first
problem raises ``BadRecordError`` naming file, record and field; with ``skip_bad=True`` the
record is dropped, a warning is logged and counted, and the run goes on. Nothing is dropped
silently: the count and the messages end up in the evaluation report.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from membuilder.plumbing.json_files import GuardedReader, JSONLimitError, loads_guarded, read_bytes

from .bounds import BOUNDS, BoundedReader, Bounds, check_bounds, clip

log = logging.getLogger("memgym.benchmarks")


MAX_MESSAGE = 1000  # characters of one error message at most


class BadRecordError(ValueError):
    """A record of a benchmark file is malformed. The message names file, record and field."""


def short(message: str, limit: int = MAX_MESSAGE) -> str:
    """A message cut in the middle to ``limit`` characters: its start names the file and record,
    its end the field. Readers clip echoed values (``bounds.clip``); this is the backstop."""
    if len(message) <= limit:
        return message
    half = (limit - 40) // 2
    return f"{message[:half]} ...[{len(message) - 2 * half} characters cut]... {message[-half:]}"


@dataclass
class Problems:
    """Collects bad records while a file is read (see the module docstring)."""

    skip_bad: bool = False
    messages: list[str] = field(default_factory=list)

    def bad(self, message: str) -> None:
        message = short(message)
        if not self.skip_bad:
            raise BadRecordError(message)
        self.messages.append(message)
        log.warning("skipped bad record: %s", message)

    @property
    def count(self) -> int:
        return len(self.messages)


def read_json(path: str | Path, bounds: Bounds = BOUNDS["locomo"]) -> Any:
    """Parse a ``.json`` or ``.json.gz`` file whole, its size, longest string and nesting depth
    checked on the bytes first (``bounds``, ``membuilder.plumbing.json_files``); errors name the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        data = read_bytes(path, bounds.max_bytes)
        check_bounds(data, str(path), bounds)
        return loads_guarded(data, str(path))
    except JSONLimitError as exc:
        raise BadRecordError(short(str(exc))) from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise BadRecordError(short(f"{path}: not a readable JSON file ({exc})")) from None


STREAM_BACKENDS = ("yajl2_c", "yajl2_cffi", "yajl2", "python")


def json_stream_backend():
    """ijson's fastest backend here: the C one (yajl2_c, in ijson's wheels) reads LongMemEval-S
    several times faster than the pure-Python parser (``bench/longmemeval_read.py``)."""
    import ijson

    for name in STREAM_BACKENDS:
        try:
            return ijson.get_backend(name)
        except ImportError:
            continue
    return ijson


def iter_json_list(path: str | Path, bounds: Bounds = BOUNDS["longmemeval"]) -> Iterator[Any]:
    """The items of a top-level JSON list (``.json`` or ``.json.gz``), parsed one at a time.

    LongMemEval-M is about 2.7 GB of JSON: streaming keeps one record in memory, and a run with
    ``--limit`` stops reading once it has enough. ``bounds`` are checked on every chunk before
    ijson sees it (a 2 GB string fails after its first MiB). Errors name the file and the item.
    """
    from ijson.common import JSONError

    backend = json_stream_backend()
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    opener = gzip.open if path.name.endswith(".gz") else open
    k = -1
    try:
        with opener(path, "rb") as fh:
            head = fh.read(1)
            while head and head.isspace():
                head = fh.read(1)
            if head != b"[":
                raise BadRecordError(f"{path}: expected a JSON list of records")
            fh.seek(0)
            # ijson's memory grows with the square of the nesting depth: the guard stops deep input first.
            reader = BoundedReader(GuardedReader(fh, str(path)), str(path), bounds)
            for item in backend.items(reader, "item", use_float=True):
                k += 1
                yield item
    except JSONLimitError as exc:
        raise BadRecordError(short(f"{exc}{f' (after record {k})' if k >= 0 else ''}")) from None
    except (JSONError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise BadRecordError(short(f"{path}: not a readable JSON file after record {k} ({clip(str(exc))})")) from None


def as_text(value: Any) -> str | None:
    """Gold answers are sometimes integers in the files (LoCoMo, LongMemEval): score them as text."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return value
    raise TypeError(f"expected text or a number, got {type(value).__name__}")


def field_fault(record: dict, fields: tuple[str, ...], kinds: tuple[type, ...] = (str, type(None)),
                wanted: str = "text") -> str | None:
    """``"field 'F' must be <wanted>, got <type>"`` for the first of ``fields`` whose value in
    ``record`` (None when absent) is not one of ``kinds``, else None. ``True``/``False`` count as
    numbers only when ``bool`` is among ``kinds``. Readers pass the message to ``Problems.bad``
    after the record's name, so each fault names file, record and field."""
    for name in fields:
        value = record.get(name)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return f"field '{name}' must be {wanted}, got {type(value).__name__}"
    return None


def list_fault(record: dict, name: str, item: type, wanted: str) -> str | None:
    """``field_fault``'s message when ``record[name]`` is present but not a list of ``item``, else None."""
    value = record.get(name)
    if value is None or isinstance(value, list) and all(isinstance(v, item) for v in value):
        return None
    return f"field '{name}' must be {wanted}, got {type(value).__name__}"
