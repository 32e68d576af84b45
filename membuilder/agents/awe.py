"""AWE: agentic write to an external store. The model writes notes every few messages; the
reply and answer prompts show the top-k notes plus the newest messages of the open session.

Parameters follow AMemGym's AWE-(messages per write, short-term messages, top-k), published
default (2, 4, 30).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from membuilder import prompts
from membuilder.agents.assistant import ChatAssistant, Message, bound, fit_newest, transcript
from membuilder.agents.notes import DEFAULT_GUIDE, note_lines
from membuilder.agents.text_index import TextIndex
from membuilder.llm.base import Sampling


class AWEAssistant(ChatAssistant):
    name = "awe"

    def __init__(self, model, embedder, *, messages_per_write: int = 2, short_term: int = 4, top_k: int = 30,
                 write_tokens: int = 96, guide: str = DEFAULT_GUIDE, **kwargs):
        if messages_per_write < 1 or short_term < 0 or top_k < 1 or write_tokens < 1:
            raise ValueError("awe: messages_per_write, top_k and write_tokens must be >= 1, short_term >= 0")
        self.embedder = embedder
        self.messages_per_write = messages_per_write
        self.short_term = short_term
        self.top_k = top_k
        self.write_tokens = write_tokens
        self.guide = guide  # the "what to remember" section; self-evolution rewrites it
        super().__init__(model, **kwargs)

    def _reset_memory(self) -> None:
        self.index = TextIndex(self.embedder)

    def session_view(self) -> list[Message]:
        return self.session[-self.short_term:] if self.short_term else []

    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        step = self.messages_per_write
        windows = [messages[i:i + step] for i in range(0, len(messages), step)]
        if not windows:
            return
        # Windows of one session see no memory, so one batched call writes them all.
        convs = [[{"role": "user", "content": prompts.render("awe_write", guide=self.guide, time=time,
                                                              messages=transcript(w))}] for w in windows]
        outs = bound(self.model, "write").generate(convs, Sampling(temperature=0.0, max_new_tokens=self.write_tokens))
        self.index.add([f"[{time}] {note}" for o in outs for note in note_lines(o.text)])

    def context(self, query: str, time: str) -> str:
        hits = self.index.search(query, self.top_k)
        return fit_newest([self.index.texts[i] for i in reversed(hits)], self.context_tokens, self.count_tokens)

    def memory_text(self) -> str:
        return "\n".join(self.index.texts)

    def state_dict(self) -> dict[str, Any]:
        return {"notes": self.index.texts, "guide": self.guide}

    def load_dict(self, state: dict[str, Any]) -> None:
        self.guide = state.get("guide", self.guide)
        self.index.add(list(state.get("notes", [])))
