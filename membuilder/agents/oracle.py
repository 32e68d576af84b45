"""Oracle assistant: its memory is the user's whole true state at the latest session.

A reference row beside the upper bound S_UB, which (as published) shows the model only the
values of each question's required variables; with the whole state the oracle also has the
distractors of the other variables, so its accuracy can differ from S_UB. Its diagnosis is
exact: the memory holds every current value, so it has no write or read failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from membuilder.agents.assistant import ChatAssistant, Message


def facts_text(facts: Mapping[str, str]) -> str:
    return "\n".join(f"- {k}: {v}" for k, v in facts.items())


class OracleAssistant(ChatAssistant):
    """Memory = the ``facts`` of the latest observed session (the true state there); no model writes."""

    name = "oracle"

    def _reset_memory(self) -> None:
        self.facts: dict[str, str] = {}

    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        if facts is not None:
            self.facts = {str(k): str(v) for k, v in facts.items()}

    def context(self, query: str, time: str) -> str:
        return facts_text(self.facts)  # never truncated: the upper bound sees the whole state

    def state_dict(self) -> dict[str, Any]:
        return {"facts": self.facts}

    def load_dict(self, state: dict[str, Any]) -> None:
        self.facts = dict(state.get("facts", {}))
