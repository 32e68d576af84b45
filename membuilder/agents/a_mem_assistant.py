"""A-Mem (PyPI ``a-mem``, module ``agentic_memory``) as the ``a-mem`` assistant of the interactive env.

At each session's end every message becomes one note ("User: text", as A-Mem's own LoCoMo runs
make one note per turn; ``messages_per_note`` > 1 joins that many), stamped with the session's
time: A-Mem asks the run's model for its keywords, context and tags and whether to evolve its
neighbours, through an OpenAI-compatible endpoint (a loopback server over a local model,
started with the assistant; its calls are booked under ``write``). ``write_log`` counts notes,
A-Mem's failed analyses and evolutions (replies it could not parse, shrugged off by A-Mem) and
its own embeddings.

Replies and answers see the ``top_k`` notes A-Mem's ``search`` ranks highest for the message or
question, best last, each with its date, context, keywords and tags. The store is a temporary
ChromaDB folder per user; ``save_state`` keeps the notes as plain JSON (with their keywords,
links and evolution) and ``load_state`` stores them again without asking the model.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from membuilder.agents.a_mem_store import add_note, note_fields, open_a_mem, restore_note, shown_note
from membuilder.agents.assistant import ChatAssistant, Message, fit_newest
from membuilder.agents.mem0_assistant import ROLE_NAMES
from membuilder.agents.peer_endpoint import model_endpoint


class AMemAssistant(ChatAssistant):
    name = "a-mem"

    def __init__(self, model, embedder, *, top_k: int = 10, messages_per_note: int = 1, write_tokens: int = 128,
                 context_length: int | None = None, **kwargs):
        if top_k < 1 or messages_per_note < 1 or write_tokens < 1:
            raise ValueError(f"{self.name}: top_k, messages_per_note and write_tokens must be >= 1")
        self.embedder_path = getattr(embedder, "path", None)
        if not self.embedder_path:
            raise ValueError(f"{self.name}: A-Mem loads its embedder itself and needs a local sentence-transformers "
                             f"model (e.g. load_embedder('minilm')), not {embedder!r}")
        self.top_k, self.messages_per_note = top_k, messages_per_note
        self.write_tokens, self.context_length = write_tokens, context_length
        self._endpoint = self._server = self.memory = None
        self._folder: str | None = None
        self.notes: list[str] = []  # note ids in the order written
        super().__init__(model, **kwargs)

    def _reset_memory(self) -> None:
        self._drop_store()
        if self._endpoint is None:  # A-Mem's client is made with the store, so the server must be up first
            self._endpoint, self._server = model_endpoint(self.model, self.write_tokens, self.context_length)
        self._folder = tempfile.mkdtemp(prefix="memgym-a-mem-")
        self.memory, self._embeds = open_a_mem(self._folder, self.embedder_path, self._endpoint)
        self.notes = []
        self.write_log: dict[str, float] = {"notes": 0, "failed_analyses": 0, "failed_evolutions": 0}

    def _drop_store(self) -> None:
        self.memory = None
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        lines = [f"{ROLE_NAMES.get(m['role'], m['role'])}: {m['content']}" for m in messages if m["content"].strip()]
        counts: dict[str, float] = {}
        for i in range(0, len(lines), self.messages_per_note):
            self.notes.append(add_note(self.memory, self._endpoint, "\n".join(lines[i:i + self.messages_per_note]),
                                       time, counts))
        for k in ("notes", "failed_analyses", "failed_evolutions"):
            self.write_log[k] += counts.get(k, 0)

    def _notes(self, ids: list[str]) -> list:
        return [n for n in (self.memory.read(i) for i in ids) if n is not None]

    def context(self, query: str, time: str) -> str:
        if not query.strip():
            return self.memory_text()
        if not self.notes:  # Chroma asks for at least one result from an empty collection
            return ""
        hits = [h["id"] for h in self.memory.search(query, k=self.top_k)]
        return fit_newest([shown_note(n) for n in reversed(self._notes(hits))], self.context_tokens,
                          self.count_tokens)

    def memory_text(self) -> str:
        return "\n".join(shown_note(n) for n in self._notes(self.notes))

    def embedding_counts(self) -> dict[str, float]:
        """A-Mem's own embedding calls and texts for the open user's store (writes and searches)."""
        return dict(self._embeds)

    def state_dict(self) -> dict[str, Any]:
        return {"notes": [note_fields(n) for n in self._notes(self.notes)], "write_log": self.write_log,
                "embeddings": self.embedding_counts()}

    def load_dict(self, state: dict[str, Any]) -> None:
        notes = state.get("notes", [])
        if not isinstance(notes, list):
            raise ValueError(f"{self.name}: saved state field 'notes' must be a list, got {type(notes).__name__}")
        self.notes = [restore_note(self.memory, fields) for fields in notes]
        self.write_log.update(state.get("write_log", {}))

    def close(self) -> None:
        self._drop_store()
        if self._server is not None:
            self._server.stop()
            self._server = None
