"""AWE: agentic write to an external store, as AMemGym publishes it (protocols §4 and §6).

AWE-(messages per write, short-term messages, top-k), published default (2, 4, 30):

* **Write every ``messages_per_write`` messages** (mem0-style inference): the model lists the
  facts worth remembering in the newest messages (``awe_write``, whose "what to remember" section
  is ``guide``, rewritten by self-evolution); the ``similar_k`` stored memories most similar to
  each fact are gathered, and the model decides one event per fact and memory (``awe_update``):
  ADD a new memory, UPDATE a stored one (its text is replaced), DELETE a stored one (it is
  removed), or NONE. With nothing stored yet every fact is added without the second call. A
  decision that is not valid JSON adds the facts, so a formatting slip of a small model never
  loses what the extraction found (``write_log`` counts these fallbacks).
* **Short-term buffer**: the last ``short_term`` messages, kept across sessions, are shown when
  replying (as conversation turns) and when answering (after the retrieved memories).
* **Retrieval**: the ``top_k`` memories most similar to the message or question.

On-policy, each window is written as soon as its messages exist (a reply later in the session
can retrieve it); off-policy (recorded sessions) the windows are written in order at session end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from membuilder import prompts
from membuilder.agents.assistant import ChatAssistant, Message, bound, fit_newest, transcript
from membuilder.agents.notes import DEFAULT_GUIDE, MAX_NOTE_CHARS, note_lines
from membuilder.agents.text_index import TextIndex
from membuilder.llm.base import Sampling
from membuilder.memory.ops import first_json_object

EVENTS = ("ADD", "UPDATE", "DELETE", "NONE")


def parse_events(text: str) -> list[dict[str, str]] | None:
    """The ``{"memory": [{id, event, text}]}`` decision as a list of events; None when it is not
    one (no JSON object, or no ``memory`` list). Events with an unknown name are dropped."""
    obj, _ = first_json_object(text or "")
    items = obj.get("memory") if isinstance(obj, dict) else None
    if not isinstance(items, list):
        return None
    out = []
    for it in items:
        if isinstance(it, dict) and str(it.get("event", "")).upper() in EVENTS:
            out.append({"id": str(it.get("id", "")).strip(), "event": str(it["event"]).upper(),
                        "text": str(it.get("text", "")).strip()[:MAX_NOTE_CHARS]})
    return out


class AWEAssistant(ChatAssistant):
    name = "awe"

    def __init__(self, model, embedder, *, messages_per_write: int = 2, short_term: int = 4, top_k: int = 30,
                 similar_k: int = 5, write_tokens: int = 96, guide: str = DEFAULT_GUIDE, **kwargs):
        if messages_per_write < 1 or short_term < 0 or top_k < 1 or similar_k < 1 or write_tokens < 1:
            raise ValueError("awe: messages_per_write, top_k, similar_k and write_tokens must be >= 1, short_term >= 0")
        self.embedder = embedder
        self.messages_per_write = messages_per_write
        self.short_term = short_term
        self.top_k = top_k
        self.similar_k = similar_k
        self.write_tokens = write_tokens
        self.guide = guide  # the "what to remember" section; self-evolution rewrites it
        super().__init__(model, **kwargs)

    def _reset_memory(self) -> None:
        self.index = TextIndex(self.embedder)
        self.recent: list[Message] = []  # the short-term buffer as of the last finished session
        self.written = 0  # messages of the open session already written
        self.write_log = {"windows": 0, "facts": 0, **{e.lower(): 0 for e in EVENTS}, "unparsed_decisions": 0}

    # ---- short-term buffer ---------------------------------------------------------------
    def session_view(self) -> list[Message]:
        return (self.recent + self.session)[-self.short_term:] if self.short_term else []

    # ---- writing -------------------------------------------------------------------------
    def act(self, message: str, time: str) -> str:
        reply = super().act(message, time)
        self._write_windows(self.session, time, final=False)
        return reply

    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        if self.written > len(messages):  # the recorded session is not the one played: write it whole
            self.written = 0
        self._write_windows(messages, time, final=True)
        self.written = 0
        self.recent = (self.recent + messages)[-self.short_term:] if self.short_term else []

    def _write_windows(self, messages: Sequence[Message], time: str, final: bool) -> None:
        step = self.messages_per_write
        while len(messages) - self.written >= step or (final and self.written < len(messages)):
            window = list(messages[self.written:self.written + step])
            self.written += len(window)
            self.write(window, time)

    def write(self, window: Sequence[Message], time: str) -> None:
        """Extract the window's facts, then ADD / UPDATE / DELETE / NONE against similar memories."""
        model = bound(self.model, "write")
        sampling = Sampling(temperature=0.0, max_new_tokens=self.write_tokens)
        self.write_log["windows"] += 1
        extract = prompts.render("awe_write", guide=self.guide, time=time, messages=transcript(window))
        facts = note_lines(model.generate([[{"role": "user", "content": extract}]], sampling)[0].text, limit=10)
        if not facts:
            return
        self.write_log["facts"] += len(facts)
        shown = list(dict.fromkeys(i for f in facts for i in self.index.search(f, self.similar_k)))
        if not shown:
            self.apply_events([{"id": "new", "event": "ADD", "text": f} for f in facts], [], time)
            return
        decide = prompts.render("awe_update", time=time, facts="\n".join(f"- {f}" for f in facts),
                                memories="\n".join(f"{k}: {self._bare(self.index.texts[i])}" for k, i in enumerate(shown)))
        events = parse_events(model.generate([[{"role": "user", "content": decide}]], sampling)[0].text)
        if events is None:
            self.write_log["unparsed_decisions"] += 1
            events = [{"id": "new", "event": "ADD", "text": f} for f in facts]
        self.apply_events(events, shown, time)

    @staticmethod
    def _bare(text: str) -> str:
        """A stored memory without its ``[time]`` stamp, as the decision prompt shows it."""
        return text.split("] ", 1)[1] if text.startswith("[") and "] " in text else text

    def apply_events(self, events: Sequence[Mapping[str, str]], shown: Sequence[int], time: str) -> None:
        """Apply decided events; ``id`` k names ``shown[k]``, the k-th memory the decision saw.
        UPDATE replaces that memory's text, DELETE removes it (DELETE wins over UPDATE of the same
        memory), ADD stores a new one; events naming no shown memory, or without text where
        text is needed, change nothing."""
        updates: dict[int, str] = {}
        deletes: set[int] = set()
        adds: list[str] = []
        for ev in events:
            event, text = ev["event"], ev.get("text", "")
            pos = shown[int(ev["id"])] if ev["id"].isdigit() and int(ev["id"]) < len(shown) else None
            if event == "ADD" and text:
                adds.append(text)
            elif event == "UPDATE" and pos is not None and text:
                updates[pos] = text
            elif event == "DELETE" and pos is not None:
                deletes.add(pos)
            else:
                continue
            self.write_log[event.lower()] += 1
        for pos, text in updates.items():
            if pos not in deletes:
                self.index.replace(pos, f"[{time}] {text}")
        self.index.remove(sorted(deletes))
        self.index.add([f"[{time}] {t}" for t in adds])

    # ---- reading -------------------------------------------------------------------------
    def context(self, query: str, time: str) -> str:
        hits = self.index.search(query, self.top_k)
        return fit_newest([self.index.texts[i] for i in reversed(hits)], self.context_tokens, self.count_tokens)

    def shown_memory(self, query: str, time: str) -> str:
        """The top-k memories, then the short-term buffer: what the answerer sees."""
        recent = transcript(self.session_view())
        return self.context(query, time) + (f"\n\nThe latest messages:\n{recent}" if recent else "")

    def memory_text(self) -> str:
        return "\n".join(self.index.texts)

    def state_dict(self) -> dict[str, Any]:
        return {"notes": self.index.texts, "guide": self.guide, "recent": self.recent, "write_log": self.write_log}

    def load_dict(self, state: dict[str, Any]) -> None:
        self.guide = state.get("guide", self.guide)
        self.index.add(list(state.get("notes", [])))
        self.recent = [{"role": str(m["role"]), "content": str(m["content"])} for m in state.get("recent", [])]
        self.write_log.update(state.get("write_log", {}))
