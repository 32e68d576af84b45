"""A-Mem (PyPI ``a-mem``, module ``agentic_memory``) as the ``memgym eval`` system ``a-mem``.

A-Mem keeps notes: each ``add_note`` asks the model for the note's keywords, context and tags,
then whether to link or re-describe its nearest neighbours ("evolution"); notes live in a
ChromaDB collection embedded by a sentence-transformers model (here the local MiniLM). As in
A-Mem's own LoCoMo runs, each turn becomes one note ("Speaker: text"), stamped with its session
date; ``window`` > 1 makes one note of that many turns (fewer model calls on a slow machine).

Offline and measured: Chroma's telemetry is off (``ANONYMIZED_TELEMETRY=False``), LiteLLM (which
A-Mem imports) reads its bundled price table instead of fetching one
(``LITELLM_LOCAL_MODEL_COST_MAP=True``), and A-Mem's ``openai`` client is pointed at the
endpoint through ``OPENAI_BASE_URL`` while the store is built (its only way to take one). A-Mem
prints (analysis) or logs (evolution), and then shrugs off, a reply it cannot parse; those
are counted as failed analyses and failed evolutions. Its model tokens are counted where the model is ours (the
loopback server books them under the run's build stage); its client reports no usage. Its own
embeddings (calls and texts, counted around its embedding function) go to the build and
retrieve stages beside ours. The store plumbing is shared with the interactive assistant
(``membuilder/agents/a_mem_store.py``).

One ChromaDB folder per conversation (A-Mem has no users), so nothing leaks across
conversations. Notes know their session, so recall is session-level and a note carries the
evidence when it comes from an evidence session and holds half the gold answer's tokens.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from membuilder.agents.a_mem_store import add_note, import_a_mem, open_a_mem, shown_note  # noqa: F401 - peer_factory imports import_a_mem from here
from membuilder.plumbing.json_files import atomic_write_text
from memgym_env.benchmarks.answering import memory_block
from memgym_env.benchmarks.systems import Context, conversation_digest, holds_answer, message_line
from memgym_env.conversation import Conversation, QAItem


class AMemSystem:
    name = "a-mem"

    def __init__(self, embedder_path: str, k: int = 10, endpoint=None, window: int = 1, server=None):
        if k < 1 or window < 1:
            raise ValueError(f"a-mem: k and window must be >= 1, got k={k}, window={window}")
        if endpoint is None:
            raise ValueError("a-mem needs an endpoint for its model (every note is analysed by it)")
        self.embedder_path, self.k, self.endpoint, self.window, self.server = embedder_path, k, endpoint, window, server
        self._mem = None
        self._embeds = {"embed_calls": 0, "embedded_texts": 0}  # A-Mem's own, for the open store
        self._conv: str | None = None
        self._notes: dict[str, str] = {}  # note id -> session id, for the open conversation
        self.costs: dict[str, dict[str, float]] = {"build": {}, "retrieve": {}}

    def _open(self, folder: Path):
        self._mem, self._embeds = open_a_mem(folder, self.embedder_path, self.endpoint)
        return self._mem

    def _count(self, stage: str, **counts: float) -> None:
        acc = self.costs[stage]
        for k, v in counts.items():
            acc[k] = round(acc.get(k, 0) + v, 3)

    def build(self, conv: Conversation, folder: Path) -> dict[str, Any]:
        folder.mkdir(parents=True, exist_ok=True)
        state_path, store = folder / "a_mem_progress.json", folder / "a_mem"
        key = {"digest": conversation_digest(conv), "window": self.window}
        state = json.loads(state_path.read_text(encoding="utf-8")) if state_path.exists() else {}
        if state.get("key") != key:
            state = {"key": key, "sessions_done": 0, "notes": {}}
            shutil.rmtree(store, ignore_errors=True)
        self._mem = self._open(store)
        self._conv = conv.id
        done = int(state["sessions_done"])
        finished = {s.id for s in conv.sessions[:done]}
        for nid, sid in list(state["notes"].items()):  # notes of a session cut off mid-write
            if sid not in finished:
                self._mem.delete(nid)
                del state["notes"][nid]
        reused, counts = done, {"notes": 0, "failed_analyses": 0, "failed_evolutions": 0, "a_mem_wall_s": 0.0}
        for s in conv.sessions[done:]:
            lines = [message_line(m) for m in s.messages if m.content.strip()]
            for i in range(0, len(lines), self.window):
                nid = self._add("\n".join(lines[i:i + self.window]), s.time, counts)
                state["notes"][nid] = s.id
                self._save(state_path, state)
            done += 1
            state["sessions_done"] = done
            self._save(state_path, state)
        self._notes = dict(state["notes"])
        counts |= self._embeds  # the store is new: all its embeddings so far are this build's
        self._count("build", **counts)
        return {"sessions_reused": reused, "sessions_built": done - reused, "memories": len(self._notes), **counts}

    def _add(self, text: str, when: str | None, counts: dict[str, float]) -> str:
        return add_note(self._mem, self.endpoint, text, when, counts)

    @staticmethod
    def _save(path: Path, state: dict[str, Any]) -> None:
        atomic_write_text(path, json.dumps(state))

    _shown = staticmethod(shown_note)

    def contexts(self, conv: Conversation, items: list[QAItem]) -> list[Context]:
        if self._conv != conv.id or self._mem is None:
            raise RuntimeError(f"a-mem: build({conv.id!r}) must come before its contexts")
        turns_of = {s.id: sorted({m.meta["id"] for m in s.messages if m.meta.get("id")}) for s in conv.sessions}
        session_of = {m.meta.get("id"): s.id for s in conv.sessions for m in s.messages}
        out = []
        started, embeds = time.perf_counter(), dict(self._embeds)
        for item in items:
            hits = [h["id"] for h in self._mem.search(item.question, k=self.k)]
            notes = [self._mem.read(h) for h in hits]
            kept = [(h, n) for h, n in zip(hits, notes) if n is not None]
            ev_sessions = {session_of[e] for e in item.evidence if e in session_of}
            written = read = None
            if ev_sessions:
                carriers = {nid for nid, sid in self._notes.items() if sid in ev_sessions
                            and (n := self._mem.read(nid)) is not None and holds_answer(n.content, item.answer)}
                written, read = bool(carriers), any(h in carriers for h, _ in kept)
            out.append(Context(memory_block(None, [self._shown(n) for _, n in kept]),
                               [turns_of.get(self._notes.get(h), []) for h, _ in kept], [h for h, _ in kept],
                               written, read, recall_level="session" if ev_sessions else None))
        self._count("retrieve", searches=len(items), a_mem_wall_s=time.perf_counter() - started,
                    **{k: v - embeds[k] for k, v in self._embeds.items()})
        return out

    def close(self) -> None:
        self._mem = None
        if self.server is not None:
            self.server.stop()
            self.server = None
