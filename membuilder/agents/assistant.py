"""The ``Assistant`` protocol of the interactive evaluation, and the chat plumbing they share.

An assistant talks with a simulated user session by session and is asked, at the end of each
period, multiple-choice questions and memory probes. It only ever sees plain strings and dicts
(membuilder never imports the environment):

| method | called | does |
|---|---|---|
| ``reset(user_id)`` | once per user | forget everything |
| ``act(message, time)`` | each user message (on-policy) | reply, remembering the turn in the open session |
| ``observe(messages, time=, session_id=, facts=)`` | at the end of each session | the finished session (its own replies, or recorded ones off-policy) goes to memory; ``facts`` is the true state, read only by the oracle |
| ``answer(items, time)`` / ``probe(items, time)`` | end of period | raw outputs (``{"answer": n}``) for a batch of ``{"question", "choices"}`` |
| ``save_state(folder)`` / ``load_state(folder)`` | after each period / on resume | plain JSON (and the bank's own files) |
| ``memory_text()`` | factual-recall check | what the memory holds, as text |

``ChatAssistant`` implements all of it around four hooks: ``_reset_memory``, ``_commit`` (write a
finished session), ``context`` (the memory shown for a query) and ``state_dict``/``load_dict``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from membuilder import prompts
from membuilder.agents.choice import best_option, score_options, stated_choice
from membuilder.llm.base import ChatMessages, PurposeBoundModel, Sampling, with_purpose
from membuilder.plumbing.json_files import write_json

SYSTEM = "You are a helpful personal assistant with a long-term memory of the user."
STATE_FILE = "assistant.json"

Message = dict[str, str]  # {"role": "user" | "assistant", "content": str}
ChoiceItem = Mapping[str, Any]  # {"question": str, "choices": [str, ...]}


@runtime_checkable
class Assistant(Protocol):
    name: str

    def reset(self, user_id: str) -> None: ...

    def act(self, message: str, time: str) -> str: ...

    def observe(self, messages: Sequence[Message], *, time: str, session_id: str,
                facts: Mapping[str, str] | None = None) -> None: ...

    def answer(self, items: Sequence[ChoiceItem], time: str) -> list[str]: ...

    def probe(self, items: Sequence[ChoiceItem], time: str) -> list[str]: ...

    def save_state(self, folder: str | Path) -> None: ...

    def load_state(self, folder: str | Path) -> None: ...

    def memory_text(self) -> str: ...


def bound(model, purpose: str):
    """``model`` booking its calls under ``purpose`` when it keeps a usage ledger; else itself."""
    if isinstance(model, PurposeBoundModel) or hasattr(model, "ledger"):
        return with_purpose(model, purpose)
    return model


def transcript(messages: Sequence[Message], user: str = "User", assistant: str = "Assistant") -> str:
    names = {"user": user, "assistant": assistant}
    return "\n".join(f"{names.get(m['role'], m['role'])}: {m['content']}" for m in messages)


def numbered(choices: Sequence[str]) -> str:
    return "\n".join(f"{i}. {c}" for i, c in enumerate(choices, 1))


def fit_newest(blocks: Sequence[str], budget: int, count: Callable[[str], int]) -> str:
    """Join the newest blocks that fit ``budget`` tokens, oldest first; older ones are dropped."""
    kept, used = [], 0
    for block in reversed(blocks):
        cost = count(block) + 1
        if kept and used + cost > budget:
            break
        kept.append(block)
        used += cost
    return "\n".join(reversed(kept))


class ChatAssistant(ABC):
    """Shared behaviour: reply with memory in the system prompt, answer by scoring option numbers.

    Arguments: ``model`` (a ``ChatModel``), ``reply_tokens`` (longest reply), ``context_tokens``
    (most tokens of memory text put in a prompt; the oldest part is cut first).
    """

    name = "assistant"

    def __init__(self, model, *, reply_tokens: int = 48, context_tokens: int = 2048):
        if reply_tokens < 1 or context_tokens < 1:
            raise ValueError(f"{self.name}: reply_tokens and context_tokens must be >= 1")
        self.model = model
        self.reply_tokens = reply_tokens
        self.context_tokens = context_tokens
        self.user_id: str | None = None
        self.session: list[Message] = []  # the open session's turns, until ``observe`` closes it
        self.answer_purpose = "answer"  # usage-ledger stage of ``answer`` (the upper bound books its own)
        self._reset_memory()

    # ---- hooks ---------------------------------------------------------------------------
    @abstractmethod
    def _reset_memory(self) -> None:
        """Each memory system supplies its own."""

    @abstractmethod
    def _commit(self, messages: list[Message], time: str, session_id: str, facts: Mapping[str, str] | None) -> None:
        """Each memory system supplies its own."""

    @abstractmethod
    def context(self, query: str, time: str) -> str:
        """The memory text shown to the model for ``query``."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Each memory system supplies its own."""

    @abstractmethod
    def load_dict(self, state: dict[str, Any]) -> None:
        """Each memory system supplies its own."""

    # ---- protocol ------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return self.model.count_tokens(text)

    def reset(self, user_id: str) -> None:
        self.user_id = str(user_id)
        self.session = []
        self._reset_memory()

    def session_view(self) -> list[Message]:
        """The open session's turns shown when replying (AWE keeps only the newest few)."""
        return list(self.session)

    def act(self, message: str, time: str) -> str:
        system = prompts.render("assistant_reply", memory=self.context(message, time) or "(nothing yet)", time=time)
        conv = [{"role": "system", "content": system}, *self.session_view(), {"role": "user", "content": message}]
        out = bound(self.model, "reply").generate([conv], Sampling(temperature=0.0, max_new_tokens=self.reply_tokens))
        reply = out[0].text.strip()
        self.session += [{"role": "user", "content": message}, {"role": "assistant", "content": reply}]
        return reply

    def observe(self, messages: Sequence[Message], *, time: str, session_id: str,
                facts: Mapping[str, str] | None = None) -> None:
        self.session = []
        clean = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
        self._commit(clean, time, session_id, facts)

    def shown_memory(self, query: str, time: str) -> str:
        """The memory text an answer to ``query`` is given (AWE adds its short-term buffer)."""
        return self.context(query, time)

    def choice_prompt(self, question: str, choices: Sequence[str], time: str) -> ChatMessages:
        user = prompts.render("assistant_choice", memory=self.shown_memory(question, time) or "(nothing yet)",
                              time=time, question=question, choices=numbered(choices))
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def _choose(self, items: Sequence[ChoiceItem], time: str, purpose: str) -> list[str]:
        if not items:
            return []
        conv = [self.choice_prompt(it["question"], it["choices"], time) for it in items]
        labels = [[str(i) for i in range(1, len(it["choices"]) + 1)] for it in items]
        scores = score_options(bound(self.model, purpose), conv, labels)
        return [json.dumps({"answer": best_option(s) + 1}) for s in scores]

    def answer(self, items: Sequence[ChoiceItem], time: str) -> list[str]:
        return self._choose(items, time, self.answer_purpose)

    def probe(self, items: Sequence[ChoiceItem], time: str) -> list[str]:
        """Which value of a state variable holds now, for the diagnosis. When the memory shown for
        the probe states exactly one of the choices word for word, that choice is the answer and no
        model is asked: a memory that holds the true state is then read exactly (a 135M model scores
        options mostly by position and put the oracle, whose memory is the true state, at 19% write
        failures). Otherwise the model scores the options, as for a question."""
        outs: list[str | None] = [None] * len(items)
        for i, it in enumerate(items):
            k = stated_choice(it["choices"], self.shown_memory(it["question"], time))
            if k is not None:
                outs[i] = json.dumps({"answer": k + 1})
        ask = [i for i, o in enumerate(outs) if o is None]
        for i, o in zip(ask, self._choose([items[i] for i in ask], time, "probe"), strict=True):
            outs[i] = o
        return [str(o) for o in outs]

    def save_state(self, folder: str | Path) -> None:
        data = {"assistant": self.name, "user_id": self.user_id, "state": self.state_dict()}
        write_json(Path(folder) / STATE_FILE, data)  # atomic: an interrupted save leaves the previous state

    def load_state(self, folder: str | Path) -> None:
        path = Path(folder) / STATE_FILE
        if not path.exists():
            raise FileNotFoundError(f"{path}: no saved assistant state")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from exc
        if data.get("assistant") != self.name:
            raise ValueError(f"{path}: field 'assistant' is {data.get('assistant')!r}, expected {self.name!r}")
        self.user_id = data.get("user_id")
        self.session = []
        self._reset_memory()
        self.load_dict(data.get("state") or {})

    def memory_text(self) -> str:
        return self.context("", "")
