"""AWI: agentic write to an in-context list of {label, value, time}, rewritten after each session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from membuilder import prompts
from membuilder.agents.assistant import ChatAssistant, Message, bound, fit_newest, transcript
from membuilder.agents.notes import DEFAULT_GUIDE, label_values
from membuilder.llm.base import Sampling


class AWIAssistant(ChatAssistant):
    """The whole list is always in the prompt (up to ``context_tokens``, oldest entries cut first)."""

    name = "awi"

    def __init__(self, model, *, write_tokens: int = 96, guide: str = DEFAULT_GUIDE, **kwargs):
        if write_tokens < 1:
            raise ValueError("awi: write_tokens must be >= 1")
        self.write_tokens = write_tokens
        self.guide = guide
        super().__init__(model, **kwargs)

    def _reset_memory(self) -> None:
        self.notes: dict[str, dict[str, str]] = {}  # label (lower-case key) -> {label, value, time}

    def _lines(self) -> list[str]:
        ordered = sorted(self.notes.values(), key=lambda n: n["time"])
        return [f"{n['label']}: {n['value']} (noted {n['time']})" for n in ordered]

    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        if not messages:
            return
        prompt = prompts.render("awi_write", guide=self.guide, notes="\n".join(self._lines()) or "(empty)",
                                time=time, messages=transcript(messages))
        out = bound(self.model, "write").generate([[{"role": "user", "content": prompt}]],
                                                  Sampling(temperature=0.0, max_new_tokens=self.write_tokens))
        for label, value in label_values(out[0].text):
            self.notes[label.lower()] = {"label": label, "value": value, "time": time}

    def context(self, query: str, time: str) -> str:
        return fit_newest(self._lines(), self.context_tokens, self.count_tokens)

    def state_dict(self) -> dict[str, Any]:
        return {"notes": list(self.notes.values()), "guide": self.guide}

    def load_dict(self, state: dict[str, Any]) -> None:
        self.guide = state.get("guide", self.guide)
        for n in state.get("notes", []):
            self.notes[str(n["label"]).lower()] = {"label": str(n["label"]), "value": str(n["value"]),
                                                   "time": str(n.get("time", ""))}
