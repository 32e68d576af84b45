"""Mem0 (PyPI ``mem0ai``) as an assistant of the interactive env, in its two modes.

* ``mem0``: every finished session's messages are stored verbatim, one memory per message
  (Mem0's ``add(infer=False)``).
* ``mem0-infer``: each window of ``messages_per_write`` messages (2, as AMemGym's AWE) goes to
  Mem0's ``add(infer=True)``: Mem0's own prompt asks the run's model for the facts to keep,
  through an OpenAI-compatible endpoint (a loopback server over a local model, started on the
  first write). A reply Mem0 cannot parse stores nothing; ``write_log`` counts those.

Windows are written when the session ends (the published AWE writes them as they arrive; here
a reply can use memories of earlier sessions only). Replies and answers see the ``top_k``
memories Mem0's ``search`` ranks highest for the message or question, best last. The store is a
temporary folder per user; ``save_state`` keeps the memories' texts as plain JSON and
``load_state`` stores them again verbatim.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from membuilder.agents.assistant import ChatAssistant, Message, fit_newest
from membuilder.agents.mem0_store import Mem0Store
from membuilder.agents.peer_endpoint import model_endpoint

ROLE_NAMES = {"user": "User", "assistant": "Assistant"}


class Mem0Assistant(ChatAssistant):
    name = "mem0"

    def __init__(self, model, embedder, *, top_k: int = 30, infer: bool = False, messages_per_write: int = 2,
                 write_tokens: int = 128, context_length: int | None = None, **kwargs):
        if top_k < 1 or messages_per_write < 1 or write_tokens < 1:
            raise ValueError(f"{self.name}: top_k, messages_per_write and write_tokens must be >= 1")
        self.embedder_path = getattr(embedder, "path", None)
        if not self.embedder_path:
            raise ValueError(f"{self.name}: Mem0 loads its embedder itself and needs a local sentence-transformers "
                             f"model (e.g. load_embedder('minilm')), not {embedder!r}")
        self.dim = int(getattr(embedder, "dim", 384))
        self.top_k, self.infer, self.messages_per_write = top_k, infer, messages_per_write
        self.write_tokens, self.context_length = write_tokens, context_length
        self._endpoint = self._server = self.store = None
        self._folder: str | None = None
        super().__init__(model, **kwargs)

    @property
    def user_key(self) -> str:
        return self.user_id or "user"

    def _reset_memory(self) -> None:
        self._drop_store()
        self._folder = tempfile.mkdtemp(prefix="memgym-mem0-")
        self.store = Mem0Store(self._folder, self.embedder_path, self.dim, self._write_endpoint())
        self.write_log = {"windows": 0, "memories": 0, "unparsed": 0, "refused": 0}

    def _write_endpoint(self):
        if not self.infer:
            return None
        if self._endpoint is None:
            self._endpoint, self._server = model_endpoint(self.model, self.write_tokens, self.context_length)
        return self._endpoint

    def _drop_store(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        meta = {"session": session_id, "time": time or ""}
        lines = [{"role": m["role"], "content": f"{ROLE_NAMES.get(m['role'], m['role'])}: {m['content']}"}
                 for m in messages if m["content"].strip()]
        if not self.infer:
            for line in lines:
                self.store.add([line], self.user_key, infer=False, metadata=meta)
            return
        costs = self.store.costs
        for i in range(0, len(lines), self.messages_per_write):
            before = (costs.memories_written, costs.writes_unparsed, costs.writes_refused)
            self.store.add(lines[i:i + self.messages_per_write], self.user_key, infer=True, metadata=meta)
            self.write_log["windows"] += 1
            self.write_log["memories"] += costs.memories_written - before[0]
            self.write_log["unparsed"] += costs.writes_unparsed - before[1]
            self.write_log["refused"] += costs.writes_refused - before[2]

    @staticmethod
    def _shown(row: dict[str, Any]) -> str:
        time = (row.get("metadata") or {}).get("time")
        return f"[{time}] {row['memory']}" if time else row["memory"]

    def context(self, query: str, time: str) -> str:
        if not query.strip():
            return self.memory_text()
        hits = self.store.search(query, self.user_key, self.top_k)
        return fit_newest([self._shown(h) for h in reversed(hits)], self.context_tokens, self.count_tokens)

    def memory_text(self) -> str:
        return "\n".join(self._shown(r) for r in self.store.all(self.user_key))

    def state_dict(self) -> dict[str, Any]:
        rows = self.store.all(self.user_key)
        return {"memories": [{"text": r["memory"], "metadata": r.get("metadata") or {}} for r in rows],
                "write_log": self.write_log, "costs": self.store.costs.to_dict()}

    def load_dict(self, state: dict[str, Any]) -> None:
        for m in state.get("memories", []):
            self.store.add([{"role": "user", "content": str(m["text"])}], self.user_key, infer=False,
                           metadata=dict(m.get("metadata") or {}))
        self.write_log.update(state.get("write_log", {}))

    def close(self) -> None:
        self._drop_store()
        if self._server is not None:
            self._server.stop()
            self._server = None


class Mem0InferAssistant(Mem0Assistant):
    """``mem0`` with inferred writes (``infer=True``) by the run's model."""

    name = "mem0-infer"

    def __init__(self, model, embedder, *, top_k: int = 30, messages_per_write: int = 2, write_tokens: int = 128,
                 context_length: int | None = None, **kwargs):
        super().__init__(model, embedder, top_k=top_k, infer=True, messages_per_write=messages_per_write,
                         write_tokens=write_tokens, context_length=context_length, **kwargs)
