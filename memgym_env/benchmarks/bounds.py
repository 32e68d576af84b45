"""Size bounds on benchmark files, checked on the raw bytes before (or while) a parser sees them.

A tiny ``.gz`` can hold a huge text: 2 MB of gzip is 2 GB of one JSON string, which ijson's C
backend reads in time quadratic in the string's length (8/16/32 MB strings: 0.4/1.4/6.1 s), and
a 1 MB ``.gz`` LoCoMo file that ``json.loads`` turns into 5 GB of Python objects. So each
benchmark has ``Bounds``: the most bytes once decompressed, the longest string or bare value
(number, literal), and for streamed files the largest record (one element of the top-level list).
``TokenScanner`` checks them in linear time on chunks, with numpy, like ``DepthScanner`` does for
nesting; every limit is a ``JSONLimitError`` naming the file and the byte offset.

The bounds sit well above the published files: LoCoMo's ``locomo10.json`` is 2.8 MB (about 100k
values), LongMemEval-M 2.7 GB in 500 records of about 6 MB (30k values each), PerLTQA's files a few
tens of MB (under 1M values, extrapolated from one character's 5.6k); the longest string in any of
them is tens of KB. The value count bounds the Python objects a parse makes: 16 MiB of ``{},``
would otherwise be 5.6M dicts, 480 MB.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass

import numpy as np

from membuilder.plumbing.json_files import JSONLimitError

MiB = 1 << 20


@dataclass(frozen=True)
class Bounds:
    max_bytes: int  # the whole file, decompressed
    max_token: int = 1 * MiB  # one string (quotes included) or one bare value
    max_record: int | None = None  # one element of the top-level list (streamed files)
    max_values: int = 1_000_000  # values in the file, or with max_record in one record (about 100-250 bytes each once parsed)


BOUNDS = {
    "locomo": Bounds(max_bytes=16 * MiB),
    "perltqa": Bounds(max_bytes=64 * MiB, max_values=2_000_000),
    "longmemeval": Bounds(max_bytes=4096 * MiB, max_record=16 * MiB),
}

QUOTE, BACKSLASH = ord('"'), ord("\\")
# Bytes that end a bare value: whitespace, punctuation and the quote.
_DELIMITER = bytes(1 if chr(b) in ' \t\r\n,:[]{}"' else 0 for b in range(256))
_BRACKET = np.zeros(256, dtype=np.int64)
_BRACKET[[ord("["), ord("{")]] = 1
_BRACKET[[ord("]"), ord("}")]] = -1
_COUNTED = bytes(1 if chr(b) in ",[]{}" else 0 for b in range(256))
CLOSE_LIST, CLOSE_OBJECT = ord("]"), ord("}")


class TokenScanner:
    """Feeds on consecutive chunks of a JSON text; raises ``JSONLimitError`` once the text, a string,
    a bare value, the count of values or (with ``max_record``) one element of the top-level container
    passes its bound.
    An open string or record is measured at every chunk, so a 2 GB string fails after ``max_token``."""

    def __init__(self, source: str, bounds: Bounds):
        self.source, self.bounds = source, bounds
        self.seen, self.in_string, self.backslashes = 0, False, 0
        self.open_at = 0  # where the open string began (absolute byte offset)
        self.last_delimiter = -1
        self.depth, self.record_at = 0, 0
        self.values, self.record_values_at = 0, 0  # values seen; the count where the open record began

    def _fail(self, what: str, cap: int, at: int) -> None:
        raise JSONLimitError(f"{self.source}: {what} longer than {cap} bytes (at byte {at}); "
                             "not a file this reader accepts")

    def feed(self, chunk: bytes) -> None:
        b = self.bounds
        data = np.frombuffer(chunk, dtype=np.uint8)
        offset, self.seen = self.seen, self.seen + len(data)
        if self.seen > b.max_bytes:
            self._fail("the file (decompressed)", b.max_bytes, b.max_bytes)
        if not len(data):
            return
        carried, self.backslashes = self.backslashes, self._trailing_backslashes(data)
        quotes = np.flatnonzero(data == QUOTE)
        maybe = quotes[(data[np.maximum(quotes - 1, 0)] == BACKSLASH) | ((quotes == 0) & bool(carried))]
        if len(maybe):  # a quote after an odd run of backslashes is escaped (rare: one by one)
            escaped = [q for q in maybe.tolist() if self._run_before(data, q, carried) % 2]
            quotes = quotes[~np.isin(quotes, escaped)]
        starts_in_string = self.in_string
        bounds = quotes + offset
        if starts_in_string:
            bounds = np.concatenate(([self.open_at], bounds))
        opens, closes = bounds[0::2], bounds[1::2]
        if len(closes):
            lengths = closes - opens[:len(closes)] + 1
            if lengths.max() > b.max_token:
                self._fail("a string", b.max_token, int(opens[int(np.argmax(lengths))]))
        self.in_string = len(bounds) % 2 == 1
        if self.in_string:
            self.open_at = int(bounds[-1])
            if self.seen - self.open_at > b.max_token:
                self._fail("a string", b.max_token, self.open_at)
        # Bare values: the gap between delimiters (inside a string a gap is shorter than the string).
        marks = chunk.translate(_DELIMITER)
        first, last = marks.find(1), marks.rfind(1)
        if len(chunk) > b.max_token and first >= 0:  # a gap may lie inside the chunk (rare: whole-file checks)
            delims = np.flatnonzero(np.frombuffer(marks, dtype=np.uint8)) + offset
            gaps = np.diff(delims)
            if len(gaps) and int(gaps.max()) - 1 > b.max_token:
                self._fail("a value", b.max_token, int(delims[int(np.argmax(gaps))]) + 1)
        if first >= 0 and offset + first - self.last_delimiter - 1 > b.max_token:
            self._fail("a value", b.max_token, self.last_delimiter + 1)
        if last >= 0:
            self.last_delimiter = offset + last
        if self.seen - self.last_delimiter - 1 > b.max_token:
            self._fail("a value", b.max_token, self.last_delimiter + 1)
        self._structure(chunk, data, quotes, starts_in_string, offset)

    def _structure(self, chunk: bytes, data, quotes, starts_in_string: bool, offset: int) -> None:
        """Values (a comma or an opening bracket starts one) in the file, or with ``max_record`` per
        record, and each record's bytes: the Python objects a parser makes grow with the values."""
        b = self.bounds
        at = np.flatnonzero(np.frombuffer(chunk.translate(_COUNTED), dtype=np.uint8))
        if len(at):  # a mark is inside a string when an odd number of string quotes came before it
            at = at[(np.searchsorted(quotes, at) + starts_in_string) % 2 == 0]
        if len(at):
            kinds = data[at]
            cum = self.values + np.cumsum((kinds != CLOSE_LIST) & (kinds != CLOSE_OBJECT))
            if b.max_record is None:
                if int(cum[-1]) > b.max_values:
                    self._fail_values(int(at[int(np.argmax(cum > b.max_values))]) + offset, "the file")
                self.values = int(cum[-1])
                return
            steps = _BRACKET[kinds]
            depth = self.depth + np.cumsum(steps)
            opens, closes = (steps == 1) & (depth == 2), (steps == -1) & (depth == 1)
            began, began_cum = at[opens] + offset, cum[opens]
            if self.depth >= 2:
                began = np.concatenate(([self.record_at], began))
                began_cum = np.concatenate(([self.record_values_at], began_cum))
            ends, ends_cum = at[closes] + offset, cum[closes]
            n = len(ends)
            if n:
                lengths, counts = ends - began[:n] + 1, ends_cum - began_cum[:n]
                if lengths.max() > b.max_record:
                    self._fail("a record", b.max_record, int(began[int(np.argmax(lengths))]))
                if counts.max() > b.max_values:
                    self._fail_values(int(began[int(np.argmax(counts))]), "a record")
            if len(began) > n:
                self.record_at, self.record_values_at = int(began[-1]), int(began_cum[-1])
            self.depth, self.values = int(depth[-1]), int(cum[-1])
        if b.max_record is not None and self.depth >= 2:
            if self.seen - self.record_at > b.max_record:
                self._fail("a record", b.max_record, self.record_at)
            if self.values - self.record_values_at > b.max_values:
                self._fail_values(self.record_at, "a record")

    def _fail_values(self, at: int, what: str) -> None:
        raise JSONLimitError(f"{self.source}: {what} holds more than {self.bounds.max_values} values (at byte {at}); "
                             "not a file this reader accepts")

    @staticmethod
    def _run_before(data, q: int, carried: int) -> int:
        j = q - 1
        while j >= 0 and data[j] == BACKSLASH:
            j -= 1
        return (q - 1 - j) + (carried if j < 0 else 0)

    def _trailing_backslashes(self, data) -> int:
        return self._run_before(data, len(data), self.backslashes) if data[-1] == BACKSLASH else 0


class BoundedReader:
    """A binary file (or reader) whose every ``read`` passes through a ``TokenScanner``, for ijson."""

    def __init__(self, fh, source: str, bounds: Bounds):
        self.fh, self.scanner = fh, TokenScanner(source, bounds)

    def read(self, size: int = -1) -> bytes:
        chunk = self.fh.read(size)
        self.scanner.feed(chunk)
        return chunk


def check_bounds(data: bytes, source: str, bounds: Bounds, chunk: int = MiB) -> None:
    """``TokenScanner`` over a whole file's bytes."""
    scanner = TokenScanner(source, bounds)
    for start in range(0, len(data), chunk):
        scanner.feed(data[start:start + chunk])


def clip(value: object, limit: int = 200) -> str:
    """A value echoed in an error, cut to about ``limit`` characters (a 1 GB ``sample_id`` must not
    become a 1 GB message): text as it is, anything else as a shortened ``repr``."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"
    shorter = reprlib.Repr()
    shorter.maxstring = shorter.maxother = shorter.maxlong = limit
    return shorter.repr(value)[:limit + 20]
