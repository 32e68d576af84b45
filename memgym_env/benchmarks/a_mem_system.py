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
loopback server books them under the run's build stage); its client reports no usage.

One ChromaDB folder per conversation (A-Mem has no users), so nothing leaks across
conversations. Notes know their session, so recall is session-level and a note carries the
evidence when it comes from an evidence session and holds half the gold answer's tokens.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from membuilder.agents.mem0_store import LoggedFailures
from membuilder.plumbing.json_files import atomic_write_text
from memgym_env.benchmarks.answering import memory_block
from memgym_env.benchmarks.systems import Context, conversation_digest, holds_answer, message_line
from memgym_env.conversation import Conversation, QAItem

INSTALL_HINT = "A-Mem is an optional peer: pip install 'memgym[peers]' (or: pip install a-mem)"
FAILED_ANALYSIS = "Error analyzing content"  # printed by A-Mem
FAILED_EVOLUTION = ("Error in memory evolution", "Error in process_memory")  # logged by A-Mem


def import_a_mem():
    os.environ["ANONYMIZED_TELEMETRY"] = "False"
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    try:
        from agentic_memory.memory_system import AgenticMemorySystem
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    return AgenticMemorySystem


@contextlib.contextmanager
def _base_url(url: str):
    old = os.environ.get("OPENAI_BASE_URL")
    os.environ["OPENAI_BASE_URL"] = url
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("OPENAI_BASE_URL", None)
        else:
            os.environ["OPENAI_BASE_URL"] = old


class AMemSystem:
    name = "a-mem"

    def __init__(self, embedder_path: str, k: int = 10, endpoint=None, window: int = 1, server=None):
        if k < 1 or window < 1:
            raise ValueError(f"a-mem: k and window must be >= 1, got k={k}, window={window}")
        if endpoint is None:
            raise ValueError("a-mem needs an endpoint for its model (every note is analysed by it)")
        self.embedder_path, self.k, self.endpoint, self.window, self.server = embedder_path, k, endpoint, window, server
        self._mem = None
        self._conv: str | None = None
        self._notes: dict[str, str] = {}  # note id -> session id, for the open conversation
        self.costs: dict[str, dict[str, float]] = {"build": {}, "retrieve": {}}

    def _open(self, folder: Path):
        cls = import_a_mem()
        with _base_url(self.endpoint.base_url):
            return cls(model_name=self.embedder_path, llm_backend="openai", llm_model=self.endpoint.model,
                       api_key=self.endpoint.api_key, storage_path=str(folder))

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
        self._count("build", **counts)
        return {"sessions_reused": reused, "sessions_built": done - reused, "memories": len(self._notes), **counts}

    def _add(self, text: str, when: str | None, counts: dict[str, float]) -> str:
        printed, failures = io.StringIO(), LoggedFailures(FAILED_EVOLUTION)
        log = logging.getLogger("agentic_memory.memory_system")
        log.addHandler(failures)
        started = time.perf_counter()
        try:
            with _base_url(self.endpoint.base_url), contextlib.redirect_stdout(printed):
                nid = self._mem.add_note(text, time=when or None)
        finally:
            log.removeHandler(failures)
        counts["a_mem_wall_s"] += time.perf_counter() - started
        counts["notes"] += 1
        counts["failed_analyses"] += printed.getvalue().count(FAILED_ANALYSIS)
        counts["failed_evolutions"] += failures.count
        return nid

    @staticmethod
    def _save(path: Path, state: dict[str, Any]) -> None:
        atomic_write_text(path, json.dumps(state))

    @staticmethod
    def _shown(note) -> str:
        extra = "; ".join(f"{name}: {value}" for name, value in (
            ("context", note.context if note.context != "General" else ""),
            ("keywords", ", ".join(note.keywords or [])), ("tags", ", ".join(note.tags or []))) if value)
        stamp = f"[{note.timestamp}] " if note.timestamp else ""
        return stamp + note.content + (f" ({extra})" if extra else "")

    def contexts(self, conv: Conversation, items: list[QAItem]) -> list[Context]:
        if self._conv != conv.id or self._mem is None:
            raise RuntimeError(f"a-mem: build({conv.id!r}) must come before its contexts")
        turns_of = {s.id: sorted({m.meta["id"] for m in s.messages if m.meta.get("id")}) for s in conv.sessions}
        session_of = {m.meta.get("id"): s.id for s in conv.sessions for m in s.messages}
        out = []
        started = time.perf_counter()
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
        self._count("retrieve", searches=len(items), a_mem_wall_s=time.perf_counter() - started)
        return out

    def close(self) -> None:
        self._mem = None
        if self.server is not None:
            self.server.stop()
            self.server = None
