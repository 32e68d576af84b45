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

from membuilder.plumbing.json_files import GuardedReader, JSONLimitError, load_json_file

log = logging.getLogger("memgym.benchmarks")


class BadRecordError(ValueError):
    """A record of a benchmark file is malformed. The message names file, record and field."""


@dataclass
class Problems:
    """Collects bad records while a file is read (see the module docstring)."""

    skip_bad: bool = False
    messages: list[str] = field(default_factory=list)

    def bad(self, message: str) -> None:
        if not self.skip_bad:
            raise BadRecordError(message)
        self.messages.append(message)
        log.warning("skipped bad record: %s", message)

    @property
    def count(self) -> int:
        return len(self.messages)


def read_json(path: str | Path) -> Any:
    """Parse a ``.json`` or ``.json.gz`` file, nesting depth and size checked first
    (``membuilder.plumbing.json_files``); errors name the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        return load_json_file(path)
    except JSONLimitError as exc:
        raise BadRecordError(str(exc)) from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise BadRecordError(f"{path}: not a readable JSON file ({exc})") from exc


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


def iter_json_list(path: str | Path) -> Iterator[Any]:
    """The items of a top-level JSON list (``.json`` or ``.json.gz``), parsed one at a time.

    LongMemEval-M is about 2.7 GB of JSON: streaming keeps one record in memory, and a run with
    ``--limit`` stops reading once it has enough. Errors name the file and the item.
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
            for item in backend.items(GuardedReader(fh, str(path)), "item", use_float=True):
                k += 1
                yield item
    except JSONLimitError as exc:
        raise BadRecordError(f"{exc}{f' (after record {k})' if k >= 0 else ''}") from None
    except (JSONError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise BadRecordError(f"{path}: not a readable JSON file after record {k} ({exc})") from exc


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
