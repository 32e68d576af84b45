"""One searchable memory entry and a retrieval hit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MEMORY_TYPES: tuple[str, ...] = ("episodic", "semantic", "procedural")


@dataclass(frozen=True)
class Entry:
    """A memory written by the Episodic, Semantic or Procedural agent.

    Entries are never deleted: UPDATE and MERGE add a new entry that names its predecessors, so
    the history stays searchable and a reader can follow how a fact changed.
    """

    id: str
    type: str
    text: str
    time: str | None = None  # session time at which the entry was written
    predecessors: tuple[str, ...] = ()  # ids this entry updates or merges
    evidence: tuple[str, ...] = ()  # MERGE: the ids of the merged entries
    time_range: tuple[str, str] | None = None  # MERGE: earliest and latest time of the evidence
    session: str | None = None  # id of the session the entry came from

    def __post_init__(self) -> None:
        if self.type not in MEMORY_TYPES:
            raise ValueError(f"entry {self.id}: type {self.type!r} is not one of {MEMORY_TYPES}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "text": self.text,
            "time": self.time,
            "predecessors": list(self.predecessors),
            "evidence": list(self.evidence),
            "time_range": list(self.time_range) if self.time_range else None,
            "session": self.session,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "entry") -> Entry:
        for key in ("id", "type", "text"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"{where}: field '{key}' must be a string")
        tr = data.get("time_range")
        if tr is not None and (not isinstance(tr, list) or len(tr) != 2):
            raise ValueError(f"{where}: field 'time_range' must be a pair or null")
        for key in ("time", "session"):
            if not isinstance(data.get(key), (str, type(None))):
                raise ValueError(f"{where}: field '{key}' must be a string or null")
        for key in ("predecessors", "evidence"):
            value = data.get(key)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise ValueError(f"{where}: field '{key}' must be a list of strings")
        return cls(
            id=data["id"],
            type=data["type"],
            text=data["text"],
            time=data.get("time"),
            predecessors=tuple(data.get("predecessors") or ()),
            evidence=tuple(data.get("evidence") or ()),
            time_range=tuple(tr) if tr else None,
            session=data.get("session"),
        )


@dataclass(frozen=True)
class Hit:
    """A retrieved entry with its cosine similarity to the query."""

    entry: Entry
    score: float

    @property
    def type(self) -> str:
        return self.entry.type

    @property
    def id(self) -> str:
        return self.entry.id

