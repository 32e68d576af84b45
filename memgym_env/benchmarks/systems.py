"""The memory systems ``memgym eval`` compares, behind one small interface.

A system ``build``s memory for a conversation into a folder (reused when the folder already
holds it) and gives, for each question, the ``Context`` the answerer sees:

| system | memory | what the answerer sees |
|---|---|---|
| ``full-context`` | nothing built | the whole history, newest sessions kept when it exceeds the budget |
| ``oracle-evidence`` | nothing built | only the evidence turns (an upper bound for reading) |
| ``rag`` | raw message windows, embedded | the top-5 chunks |
| ``membuilder`` | Core + Episodic/Semantic/Procedural bank, built session by session | Core + top-10 entries |
| ``mem0``, ``mem0-infer``, ``a-mem`` | the published systems, run as they ship (``memgym_env/peers``) | their top-10 memories |

Every context also says, where it can, whether the evidence reached memory (``written``) and
whether it was in front of the answerer (``read``), so a wrong answer splits into write, read or
answer failure. Raw-text systems store everything (written = True) and know the source turn of
each chunk. For MemBuilder, entries remember only their session: an entry counts as carrying the
evidence when it comes from an evidence session and holds at least half of the gold answer's
(stemmed) tokens, or the Core block does; its recall@k is session-level where a session holds
several ids (LoCoMo and LongMemEval turns; PerLTQA's profile and relationships) and exact,
memory-id level, where a session is one memory (PerLTQA's events and dialogues):
``Context.recall_level`` says which, per question.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from membuilder.agents.constructor import MemBuilderPolicy, build_observation
from membuilder.agents.session_windows import session_windows
from membuilder.llm.base import Sampling
from membuilder.memory import MemoryBank
from membuilder.memory.ops import AGENTS
from membuilder.plumbing.json_files import atomic_write_bytes, atomic_write_text
from memgym_env.benchmarks.peers import PEER_SYSTEMS
from memgym_env.conversation import Conversation, QAItem, Session

from .answering import memory_block
from .locomo_f1 import answer_tokens

SYSTEMS = ("membuilder", "rag", "full-context", "oracle-evidence") + PEER_SYSTEMS


@dataclass
class Context:
    memory: str  # the memory block of the answer prompt
    hits: list[list[str]] = field(default_factory=list)  # per ranked hit: the source ids it came from
    entry_ids: list[str] = field(default_factory=list)  # ids of the retrieved entries or chunks
    written: bool | None = None  # the evidence reached memory (None: no evidence to check)
    read: bool | None = None  # the evidence was in what the answerer saw
    # "memory-id" when each hit's sources are exactly the memory it holds; "session" when a hit
    # stands for every id of its session (MemBuilder entries know only their session)
    recall_level: str | None = None


class System(Protocol):
    name: str

    def build(self, conv: Conversation, folder: Path) -> dict[str, Any]: ...

    def contexts(self, conv: Conversation, items: list[QAItem]) -> list[Context]: ...


def conversation_digest(conv: Conversation) -> str:
    """Changes when the sessions change: a saved memory is reused only for the same history."""
    blob = json.dumps([[s.id, s.time, [m.content for m in s.messages]] for s in conv.sessions], ensure_ascii=False)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()[:16]


def _session_header(s: Session) -> str:
    return f"[{s.id}, {s.time}]" if s.time else f"[{s.id}]"


def message_line(m) -> str:
    return f"{m.speaker or m.role}: {m.content}"


def _any_evidence(ids: set[str], item: QAItem) -> bool | None:
    return None if not item.evidence else bool(ids & set(item.evidence))


class FullContext:
    """The whole history in the prompt, trimmed from the oldest session to fit ``max_tokens``."""

    name = "full-context"

    def __init__(self, count_tokens: Callable[[str], int] | None = None, max_tokens: int = 6000):
        self.count_tokens = count_tokens or (lambda text: len(text) // 4)
        self.max_tokens = max_tokens

    def build(self, conv: Conversation, folder: Path) -> dict[str, Any]:
        return {}

    def _history(self, conv: Conversation) -> tuple[str, set[str]]:
        blocks, ids, used = [], set(), 0
        for s in reversed(conv.sessions):
            text = _session_header(s) + "\n" + "\n".join(message_line(m) for m in s.messages)
            cost = self.count_tokens(text)
            if blocks and used + cost > self.max_tokens:
                break
            blocks.append(text)
            ids.update(m.meta.get("id") for m in s.messages)
            used += cost
        return "Conversation history (oldest first):\n" + "\n\n".join(reversed(blocks)), ids

    def contexts(self, conv: Conversation, items: list[QAItem]) -> list[Context]:
        text, ids = self._history(conv)
        return [Context(text, [sorted(i for i in ids if i)], [], True if item.evidence else None, _any_evidence(ids, item))
                for item in items]


class OracleEvidence:
    """Only the evidence turns, with their session dates: isolates answering from memory."""

    name = "oracle-evidence"

    def build(self, conv: Conversation, folder: Path) -> dict[str, Any]:
        return {}

    def contexts(self, conv: Conversation, items: list[QAItem]) -> list[Context]:
        out = []
        for item in items:
            wanted = set(item.evidence)
            lines, ids = [], set()
            for s in conv.sessions:
                chosen = [m for m in s.messages if m.meta.get("id") in wanted]
                if not chosen and s.id in item.meta.get("answer_session_ids", ()) and not wanted:
                    chosen = s.messages  # LongMemEval abstention: no marked turn, show the evidence sessions
                if chosen:
                    lines.append(_session_header(s) + "\n" + "\n".join(message_line(m) for m in chosen))
                    ids.update(m.meta.get("id") for m in chosen)
            memory = "Relevant conversation excerpts:\n" + ("\n\n".join(lines) or "(none)")
            has = True if item.evidence else None
            out.append(Context(memory, [sorted(i for i in ids if i)], [], has, has))
        return out


class Rag:
    """Raw message windows of ``window`` turns, embedded; the answerer sees the top ``k``."""

    name = "rag"

    def __init__(self, embedder, k: int = 5, window: int = 2):
        self.embedder, self.k, self.window = embedder, k, window
        self._cache: dict[str, tuple[list[dict[str, Any]], np.ndarray]] = {}

    def _chunks(self, conv: Conversation) -> list[dict[str, Any]]:
        chunks = []
        for s in conv.sessions:
            for start in range(0, len(s.messages), self.window):
                part = s.messages[start:start + self.window]
                chunks.append({"id": f"{s.id}#{start}", "session": s.id,
                               "text": _session_header(s) + " " + " / ".join(message_line(m) for m in part),
                               "sources": [m.meta.get("id") for m in part if m.meta.get("id")]})
        return chunks

    def build(self, conv: Conversation, folder: Path) -> dict[str, Any]:
        folder.mkdir(parents=True, exist_ok=True)
        key = f"{conversation_digest(conv)}:{getattr(self.embedder, 'name', '?')}:{self.window}"
        meta_path, vec_path = folder / "rag_chunks.json", folder / "rag_vectors.npy"
        if meta_path.exists() and vec_path.exists():
            saved = json.loads(meta_path.read_text(encoding="utf-8"))
            if saved.get("key") == key:
                self._cache[conv.id] = (saved["chunks"], np.load(vec_path))
                return {"chunks": len(saved["chunks"]), "reused": True}
        chunks = self._chunks(conv)
        vectors = np.asarray(self.embedder.encode([c["text"] for c in chunks]), dtype=np.float32)
        npy = io.BytesIO()
        np.save(npy, vectors)
        atomic_write_bytes(vec_path, npy.getvalue())
        atomic_write_text(meta_path, json.dumps({"key": key, "chunks": chunks}, ensure_ascii=False))
        self._cache[conv.id] = (chunks, vectors)
        return {"chunks": len(chunks), "reused": False}

    def contexts(self, conv: Conversation, items: list[QAItem]) -> list[Context]:
        chunks, vectors = self._cache[conv.id]
        if not items:
            return []
        queries = np.asarray(self.embedder.encode([it.question for it in items]), dtype=np.float32)
        scores = queries @ vectors.T if len(chunks) else np.zeros((len(items), 0))
        out = []
        for item, row in zip(items, scores, strict=True):
            top = np.argsort(-row, kind="stable")[: self.k]
            hits = [chunks[i] for i in top]
            seen = {s for h in hits for s in h["sources"]}
            out.append(Context(memory_block(None, [h["text"] for h in hits], "Retrieved conversation excerpts"),
                               [h["sources"] for h in hits], [h["id"] for h in hits],
                               True if item.evidence else None, _any_evidence(seen, item)))
        return out


# ---- MemBuilder ---------------------------------------------------------------------------------

# Applies the four memory agents' outputs for one session to a bank: (bank, session, conversation) -> None.
SessionBuilder = Callable[[Any, Session, Conversation], None]


def membuilder_session_builder(model, max_new_tokens: int = 384, view_k: int = 20,
                               window_tokens: int | None = None) -> SessionBuilder:
    """The MemBuilder constructor over ``model``: the one place the membuilder system plugs in.

    Per session, all four agents answer from the same observation (``build_observation``: the
    session, its date, Core and the top-``view_k`` entries of their own type, the view a trained
    policy saw in MemoryGym-v0) and only then are
    their outputs applied, so no agent sees another's writes (protocols §1). A session longer than
    ``window_tokens`` is written window by window, whole turns each (``MemBuilderAssistant`` does the
    same); None writes every session whole.
    """
    if model is None:
        return lambda bank, session, conv: None
    policy = MemBuilderPolicy(model, Sampling(temperature=0.0, max_new_tokens=max_new_tokens))

    def build(bank, session: Session, conv: Conversation) -> None:
        for window in session_windows(session.render(), window_tokens, model.count_tokens):
            outputs = policy.act(build_observation(bank, window, session.time, view_k))
            for agent in AGENTS:
                bank.apply(agent, outputs[agent], time=session.time, session=session.id)

    build.policy = policy  # its prompts_cut goes into the run's report (MemBuilder.costs)
    return build


def holds_answer(text: str, gold: str | None) -> bool:
    gold_tokens = set(answer_tokens(gold or ""))
    return bool(gold_tokens) and len(gold_tokens & set(answer_tokens(text))) >= 0.5 * len(gold_tokens)


class MemBuilder:
    """Core + typed entries, written session by session and saved after each (resumable).
    ``live_only``: answers retrieve only entries no UPDATE or MERGE replaced (default: every
    entry, as MemBuilder is published)."""

    name = "membuilder"

    def __init__(self, build_session: SessionBuilder, embedder, k: int = 10, progress: Callable[[str], None] | None = None,
                 compressor: Callable[[str, int], str] | None = None, live_only: bool = False):
        self.build_session, self.embedder, self.k, self.compressor = build_session, embedder, k, compressor
        self.live_only = live_only
        self.progress = progress
        self._banks: dict[str, Any] = {}
        self._cut_reported = 0

    @property
    def costs(self) -> dict[str, dict[str, float]]:
        """Constructor prompts cut to the model's context since the last report (memory view first,
        then Core, then the session's start), for the build stage of the run's report."""
        policy = getattr(self.build_session, "policy", None)
        cut = getattr(policy, "prompts_cut", 0) - self._cut_reported
        self._cut_reported += cut
        return {"build": {"constructor_prompts_cut": cut}} if cut else {}

    def build(self, conv: Conversation, folder: Path) -> dict[str, Any]:
        folder.mkdir(parents=True, exist_ok=True)
        state_path, bank_path = folder / "progress.json", folder / "bank"
        digest = conversation_digest(conv)
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
        cut = 0  # constructor prompts cut to the model's context, over every invocation that built this conversation
        if state.get("digest") == digest and bank_path.exists():
            bank = MemoryBank.load(bank_path, self.embedder, compressor=self.compressor)
            done, cut = int(state.get("sessions_done", 0)), int(state.get("prompts_cut", 0))
        else:
            bank, done = MemoryBank(self.embedder, compressor=self.compressor), 0
        reused = done
        policy = getattr(self.build_session, "policy", None)
        for s in conv.sessions[done:]:
            before = getattr(policy, "prompts_cut", 0)
            self.build_session(bank, s, conv)
            cut += getattr(policy, "prompts_cut", 0) - before
            done += 1
            bank.save(bank_path)
            atomic_write_text(state_path, json.dumps({"digest": digest, "sessions_done": done, "prompts_cut": cut}))
            if self.progress:
                self.progress(f"{conv.id}: session {done}/{len(conv.sessions)}")
        self._banks[conv.id] = bank
        return {"sessions_reused": reused, "sessions_built": done - reused, "constructor_prompts_cut": cut,
                **bank.counts()}

    def contexts(self, conv: Conversation, items: list[QAItem]) -> list[Context]:
        bank = self._banks[conv.id]
        hits_per_item = bank.retrieve_many([it.question for it in items], self.k, live_only=self.live_only)
        session_of = {m.meta.get("id"): s.id for s in conv.sessions for m in s.messages}
        # Entries know their session only, so a hit's sources are that session's turn ids.
        turns_of = {s.id: sorted({m.meta["id"] for m in s.messages if m.meta.get("id")}) for s in conv.sessions}
        entries = bank.entries()
        out = []
        for item, hits in zip(items, hits_per_item, strict=True):
            ev_sessions = {session_of[e] for e in item.evidence if e in session_of}
            written = read = None
            if ev_sessions:
                carriers = {e.id for e in entries if e.session in ev_sessions and holds_answer(e.text, item.answer)}
                in_core = holds_answer(bank.core.text, item.answer)
                written = in_core or bool(carriers)
                read = in_core or any(h.entry.id in carriers for h in hits)
            exact = bool(ev_sessions) and all(len(turns_of.get(sid, [])) == 1 for sid in ev_sessions)
            out.append(Context(memory_block(bank.core.text, [h.entry.text for h in hits]),
                               [turns_of.get(h.entry.session, []) for h in hits],
                               [h.entry.id for h in hits], written, read,
                               recall_level=("memory-id" if exact else "session") if ev_sessions else None))
        return out
