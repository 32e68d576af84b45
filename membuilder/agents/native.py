"""Native assistant: the whole conversation history in the prompt, oldest sessions cut first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from membuilder.agents.assistant import ChatAssistant, Message, fit_newest, transcript


class NativeAssistant(ChatAssistant):
    """No memory system: every past session, as a transcript with its time, up to ``context_tokens``."""

    name = "native"

    def _reset_memory(self) -> None:
        self.history: list[dict[str, Any]] = []  # {"id", "time", "messages"}
        self._blocks: list[str] = []

    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        if messages:
            self.history.append({"id": session_id, "time": time, "messages": messages})
            self._blocks.append(f"[{time}]\n" + transcript(messages))

    def context(self, query: str, time: str) -> str:
        return fit_newest(self._blocks, self.context_tokens, self.count_tokens)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_dict(self, state: dict[str, Any]) -> None:
        for s in state.get("history", []):
            self._commit(s["messages"], s["time"], s["id"], None)
