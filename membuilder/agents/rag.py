"""RAG assistant: raw message chunks in a vector index, the top-k most similar shown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from membuilder.agents.assistant import ChatAssistant, Message, fit_newest, transcript
from membuilder.agents.text_index import TextIndex


class RAGAssistant(ChatAssistant):
    """Stores each run of ``messages_per_chunk`` messages (a user turn and its reply by default)
    verbatim with its time; shows the ``top_k`` chunks most similar to the query."""

    name = "rag"

    def __init__(self, model, embedder, *, messages_per_chunk: int = 2, top_k: int = 30, **kwargs):
        if messages_per_chunk < 1 or top_k < 1:
            raise ValueError("rag: messages_per_chunk and top_k must be >= 1")
        self.embedder = embedder
        self.messages_per_chunk = messages_per_chunk
        self.top_k = top_k
        super().__init__(model, **kwargs)

    def _reset_memory(self) -> None:
        self.index = TextIndex(self.embedder)

    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        step = self.messages_per_chunk
        self.index.add([f"[{time}] " + transcript(messages[i:i + step]) for i in range(0, len(messages), step)])

    def context(self, query: str, time: str) -> str:
        hits = self.index.search(query, self.top_k)
        # Best hit last, nearest the question; the budget drops the weakest hits first.
        return fit_newest([self.index.texts[i] for i in reversed(hits)], self.context_tokens, self.count_tokens)

    def memory_text(self) -> str:
        return "\n".join(self.index.texts)

    def state_dict(self) -> dict[str, Any]:
        return {"chunks": self.index.texts}

    def load_dict(self, state: dict[str, Any]) -> None:
        self.index.add(list(state.get("chunks", [])))
