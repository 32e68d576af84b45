"""Mem0 as a ``memgym eval`` system, in its two published modes.

| system | write (per conversation, session by session) | what the answerer sees |
|---|---|---|
| ``mem0`` | ``add(infer=False)``: every turn stored verbatim as one memory ("Speaker: text") | the top-k of Mem0's ``search``, each with its session date |
| ``mem0-infer`` | ``add(infer=True)`` per window of turns: Mem0's prompt asks the model for facts, stored as memories | the same |

One Mem0 user per conversation (its id) and one FAISS folder per conversation
(``<out>/memory/<conversation>/mem0``), so no memory reaches another conversation. The
answer prompt and judge are the runner's, as for every system.

Evidence tracking: a raw memory is one turn, so recall is exact (``memory-id``); an inferred
memory knows only the session it came from, so it counts as carrying the evidence when it comes
from an evidence session and holds at least half the gold answer's tokens (the rule MemBuilder's
entries follow), and recall is session-level.

Resume: progress is saved after each session; memories of a session cut off by an interrupt
are deleted before that session is written again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from membuilder.agents.mem0_store import Mem0Store
from membuilder.plumbing.json_files import atomic_write_text
from memgym_env.benchmarks.answering import memory_block
from memgym_env.benchmarks.systems import Context, conversation_digest, holds_answer, message_line
from memgym_env.conversation import Conversation, QAItem, Session

COST_KEYS = ("llm_calls", "prompt_tokens", "completion_tokens", "embed_calls", "embedded_texts",
             "memories_written", "writes_unparsed", "writes_refused")


def windows(session: Session, size: int) -> list[list]:
    """The session's messages in runs of ``size`` (0: the whole session in one)."""
    msgs = session.messages
    step = size if size > 0 else max(len(msgs), 1)
    return [msgs[i:i + step] for i in range(0, len(msgs), step)]


class Mem0System:
    """``mem0`` (raw) or ``mem0-infer``. ``endpoint``: where inferred writes go
    (``membuilder.agents.peer_endpoint.model_endpoint``); ``window``: messages per inferred write;
    ``server``: the loopback server behind ``endpoint``, if one was started for it (stopped by ``close``)."""

    def __init__(self, embedder_path: str, k: int = 10, infer: bool = False, endpoint=None, window: int = 0,
                 dim: int = 384, server=None):
        if k < 1 or window < 0:
            raise ValueError(f"mem0: k must be >= 1 and window >= 0, got k={k}, window={window}")
        if infer and endpoint is None:
            raise ValueError("mem0-infer needs an endpoint for its model")
        self.name = "mem0-infer" if infer else "mem0"
        self.embedder_path, self.k, self.infer, self.endpoint, self.window, self.dim = \
            embedder_path, k, infer, endpoint, window, dim
        self.server = server
        self._store = None  # the open conversation's store (one at a time: each holds a MiniLM copy)
        self._conv: str | None = None
        self.costs: dict[str, dict[str, float]] = {"build": {}, "retrieve": {}}

    # ---- building ------------------------------------------------------------------------
    def _open(self, conv_id: str, folder: Path):
        if self._store is not None:
            self._store.close()
        self._store = Mem0Store(folder, self.embedder_path, self.dim, self.endpoint if self.infer else None)
        self._conv = conv_id
        return self._store

    def _key(self, conv: Conversation) -> dict[str, Any]:
        return {"digest": conversation_digest(conv), "system": self.name, "window": self.window if self.infer else None}

    def build(self, conv: Conversation, folder: Path) -> dict[str, Any]:
        folder.mkdir(parents=True, exist_ok=True)
        state_path, store_dir = folder / "mem0_progress.json", folder / "mem0"
        state = json.loads(state_path.read_text(encoding="utf-8")) if state_path.exists() else {}
        key = self._key(conv)
        done = int(state.get("sessions_done", 0)) if state.get("key") == key else 0
        if done == 0 and store_dir.exists():
            shutil.rmtree(store_dir)  # another history or settings: start clean
        store = self._open(conv.id, store_dir)
        before = store.costs.to_dict()
        finished = {s.id for s in conv.sessions[:done]}
        for row in store.all(conv.id) if done else []:  # a session cut off mid-write is written again
            if (row.get("metadata") or {}).get("session") not in finished:
                store.delete(row["id"])
        reused = done
        for s in conv.sessions[done:]:
            self._write_session(store, conv.id, s)
            done += 1
            atomic_write_text(state_path, json.dumps({"key": key, "sessions_done": done}))
        after = store.costs.to_dict()
        spent = {k: after[k] - before[k] for k in COST_KEYS}
        self._book("build", spent, after["add_wall_s"] - before["add_wall_s"])
        out = {"sessions_reused": reused, "sessions_built": done - reused, "memories": len(store.all(conv.id)), **spent}
        if after.get("first_refusal"):
            out["first_refusal"] = after["first_refusal"]
        return out

    def _write_session(self, store, user: str, s: Session) -> None:
        meta = {"session": s.id, "time": s.time or ""}
        if not self.infer:
            for m in s.messages:
                if m.content.strip():
                    store.add([{"role": m.role, "content": message_line(m)}], user, infer=False,
                              metadata={**meta, "turn": m.meta.get("id") or ""})
            return
        for part in windows(s, self.window):
            msgs = [{"role": m.role, "content": message_line(m)} for m in part if m.content.strip()]
            if msgs:
                store.add(msgs, user, infer=True, metadata=meta)

    def _book(self, stage: str, spent: dict[str, float], wall_s: float) -> None:
        acc = self.costs[stage]
        for k, v in spent.items():
            acc[k] = acc.get(k, 0) + v
        acc["mem0_wall_s"] = round(acc.get("mem0_wall_s", 0.0) + wall_s, 3)

    # ---- reading -------------------------------------------------------------------------
    def contexts(self, conv: Conversation, items: list[QAItem]) -> list[Context]:
        if self._conv != conv.id or self._store is None:
            raise RuntimeError(f"mem0: build({conv.id!r}) must come before its contexts")
        store = self._store
        before = store.costs.to_dict()
        turns_of = {s.id: sorted({m.meta["id"] for m in s.messages if m.meta.get("id")}) for s in conv.sessions}
        session_of = {m.meta.get("id"): s.id for s in conv.sessions for m in s.messages}
        rows = store.all(conv.id) if self.infer else []
        out = []
        for item in items:
            hits = store.search(item.question, conv.id, self.k)
            metas = [h.get("metadata") or {} for h in hits]
            texts = [f"[{m.get('time')}] {h['memory']}" if m.get("time") else h["memory"] for h, m in zip(hits, metas)]
            block = memory_block(None, texts)
            if not self.infer:
                sources = [[m["turn"]] if m.get("turn") else [] for m in metas]
                seen = {t for src in sources for t in src}
                has = bool(item.evidence) or None
                out.append(Context(block, sources, [h["id"] for h in hits], True if has else None,
                                   bool(seen & set(item.evidence)) if has else None,
                                   recall_level="memory-id" if has else None))
                continue
            sources = [turns_of.get(m.get("session"), []) for m in metas]
            ev_sessions = {session_of[e] for e in item.evidence if e in session_of}
            written = read = None
            if ev_sessions:
                carriers = {r["id"] for r in rows if (r.get("metadata") or {}).get("session") in ev_sessions
                            and holds_answer(r.get("memory", ""), item.answer)}
                written, read = bool(carriers), any(h["id"] in carriers for h in hits)
            out.append(Context(block, sources, [h["id"] for h in hits], written, read,
                               recall_level="session" if ev_sessions else None))
        after = store.costs.to_dict()
        self._book("retrieve", {k: after[k] - before[k] for k in COST_KEYS if k.startswith("embed")},
                   after["search_wall_s"] - before["search_wall_s"])
        return out

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
        if self.server is not None:
            self.server.stop()
            self.server = None
