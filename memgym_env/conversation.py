"""The one episode format every data source turns into.

A ``Conversation`` is a list of ``Session``s (each with a time and messages) plus the
``QAItem``s asked about it. LoCoMo, LongMemEval, PerLTQA, AMemGym worlds and users' own
transcripts are all read into this shape, so the environments and the evaluation runner never
need to know where a conversation came from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from membuilder.plumbing.json_files import read_json, write_json


@dataclass
class Message:
    role: str  # "user" | "assistant" (who speaks, from the assistant's point of view)
    content: str
    speaker: str | None = None  # the speaker's own name where the source has one
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Session:
    id: str
    time: str | None  # the session's date and time as the source writes it
    messages: list[Message] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The session as plain text with speaker labels, the form the memory agents read."""
        lines = []
        for m in self.messages:
            who = m.speaker or m.role
            lines.append(f"{who}: {m.content}")
        return "\n".join(lines)


@dataclass
class QAItem:
    id: str
    question: str
    answer: str | None  # None where the source has no gold answer (LoCoMo category 5)
    category: str | int | None = None
    evidence: list[str] = field(default_factory=list)
    session: str | None = None  # the session the question is about (for per-session rewards)
    question_date: str | None = None
    choices: list[str] | None = None  # multiple-choice options, when the source has them
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Conversation:
    id: str
    sessions: list[Session]
    qa: list[QAItem] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def session_index(self, session_id: str) -> int:
        for i, s in enumerate(self.sessions):
            if s.id == session_id:
                return i
        raise KeyError(f"conversation {self.id}: no session {session_id!r}")

    def qa_for_session(self, session_id: str) -> list[QAItem]:
        return [q for q in self.qa if q.session == session_id]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "conversation") -> Conversation:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a conversation object, got {type(data).__name__}")
        try:
            sessions = [
                Session(
                    id=str(s["id"]),
                    time=s.get("time"),
                    messages=[Message(**m) for m in s.get("messages", [])],
                    meta=s.get("meta", {}),
                )
                for s in data["sessions"]
            ]
            qa = [QAItem(**q) for q in data.get("qa", [])]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: malformed conversation record: {exc}") from exc
        return cls(id=str(data.get("id", "conversation")), sessions=sessions, qa=qa, meta=data.get("meta", {}))

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> Conversation:
        """A conversation file (``.json`` or ``.json.gz``), read through the JSON guard (nesting
        depth and size checked first); every fault is a ``ValueError`` naming the file."""
        return cls.from_dict(read_json(path), where=str(path))
