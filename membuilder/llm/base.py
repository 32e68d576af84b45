"""The one interface every language model in MemGym is used through.

The policy, the answer model, the judge and the user simulator are all ``ChatModel``s. Calls are
batched: environments score many candidates in one ``generate`` so a GPU engine (vLLM) or a
server with concurrency sees large batches.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# A conversation is a list of chat messages: [{"role": "system"|"user"|"assistant", "content": str}].
ChatMessages = list[dict[str, str]]


@dataclass
class Sampling:
    temperature: float = 0.0  # 0 means greedy decoding
    top_p: float = 1.0
    max_new_tokens: int = 256
    n: int = 1  # completions per conversation
    stop: list[str] | None = None
    seed: int | None = None
    json_schema: dict[str, Any] | None = None  # constrain output where the backend can
    min_new_tokens: int = 0  # end-of-turn is suppressed before this many (benchmarks); openai: vLLM's min_tokens

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Completion:
    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


@dataclass
class Usage:
    """Running totals of what a model has been asked to do."""

    calls: int = 0  # generate / choice_logprobs invocations
    conversations: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0  # seconds spent inside the model's calls
    prompts_cut: int = 0  # prompts shortened to fit the model's context (membuilder.llm.context_fit)

    def add(self, completions: list[Completion], conversations: int, wall_s: float = 0.0) -> None:
        self.calls += 1
        self.conversations += conversations
        self.prompt_tokens += sum(c.prompt_tokens for c in completions)
        self.completion_tokens += sum(c.completion_tokens for c in completions)
        self.wall_s += wall_s

    def add_counts(self, conversations: int, prompt_tokens: int, completion_tokens: int, wall_s: float,
                   prompts_cut: int = 0) -> None:
        self.calls += 1
        self.conversations += conversations
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.wall_s += wall_s
        self.prompts_cut += prompts_cut

    def to_dict(self) -> dict[str, int | float]:
        return dict(calls=self.calls, conversations=self.conversations,
                    prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                    wall_s=round(self.wall_s, 3), prompts_cut=self.prompts_cut)


class UsageLedger:
    """Usage per named purpose (``construct``, ``answer``, ``judge``, ``simulate``, ...) plus the total.

    Every backend owns one; calls made through ``with_purpose(model, "judge")`` are booked under
    "judge", all others under "default". Thread-safe, since the openai backend records from
    worker threads.
    """

    def __init__(self) -> None:
        self.total = Usage()
        self.by_purpose: dict[str, Usage] = {}
        self._lock = threading.Lock()

    def record(self, purpose: str | None, conversations: int, prompt_tokens: int, completion_tokens: int,
               wall_s: float, prompts_cut: int = 0) -> None:
        with self._lock:
            for usage in (self.total, self.by_purpose.setdefault(purpose or "default", Usage())):
                usage.add_counts(conversations, prompt_tokens, completion_tokens, wall_s, prompts_cut)

    def record_completions(self, purpose: str | None, completions: list[Completion], conversations: int,
                           wall_s: float, prompts_cut: int = 0) -> None:
        self.record(purpose, conversations, sum(c.prompt_tokens for c in completions),
                    sum(c.completion_tokens for c in completions), wall_s, prompts_cut)

    def note_cuts(self, purpose: str | None, prompts_cut: int) -> None:
        """Book prompts cut to fit the context within a call recorded separately."""
        if prompts_cut:
            with self._lock:
                for usage in (self.total, self.by_purpose.setdefault(purpose or "default", Usage())):
                    usage.prompts_cut += prompts_cut

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"total": self.total.to_dict(),
                    "by_purpose": {k: v.to_dict() for k, v in sorted(self.by_purpose.items())}}


@runtime_checkable
class ChatModel(Protocol):
    """A batched chat model.

    ``generate`` returns ``len(conversations) * sampling.n`` completions, conversation-major: the
    ``n`` samples of conversation 0, then those of conversation 1, and so on.
    """

    name: str
    usage: Usage

    def generate(self, conversations: list[ChatMessages], sampling: Sampling | None = None) -> list[Completion]: ...

    def choice_logprobs(self, conversation: ChatMessages, choices: list[str]) -> list[float]: ...

    def count_tokens(self, text: str) -> int: ...


class PurposeBoundModel:
    """A view of a ``ChatModel`` that books every call under one purpose.

    Roles share one model object (and its weights) while the report still shows what each
    stage cost: ``judge = with_purpose(model, "judge")``. ``usage`` is this purpose's share;
    the underlying model's ``usage`` stays the grand total.
    """

    def __init__(self, model: Any, purpose: str):
        self.model = model
        self.purpose = purpose
        self.name = model.name

    @property
    def usage(self) -> Usage:
        with self.model.ledger._lock:
            return self.model.ledger.by_purpose.setdefault(self.purpose, Usage())

    def generate(self, conversations: list[ChatMessages], sampling: Sampling | None = None) -> list[Completion]:
        return self.model.generate(conversations, sampling, purpose=self.purpose)

    def choice_logprobs(self, conversation: ChatMessages, choices: list[str]) -> list[float]:
        return self.model.choice_logprobs(conversation, choices, purpose=self.purpose)

    def count_tokens(self, text: str) -> int:
        return self.model.count_tokens(text)

    @property
    def context_length(self) -> int | None:
        return getattr(self.model, "context_length", None)

    def __repr__(self) -> str:
        return f"PurposeBoundModel({self.model!r}, purpose={self.purpose!r})"


def with_purpose(model: Any, purpose: str) -> PurposeBoundModel:
    """Bind ``model`` (a MemGym backend, or another bound view) to a named purpose for accounting."""
    if isinstance(model, PurposeBoundModel):
        model = model.model
    if not hasattr(model, "ledger"):
        raise TypeError(f"with_purpose needs a MemGym backend with a usage ledger, got {type(model).__name__}")
    return PurposeBoundModel(model, purpose)


def check_conversations(conversations: Any, where: str) -> list[ChatMessages]:
    """Validate the shape of a batch of conversations; a clear error names the bad item."""
    if isinstance(conversations, (str, dict)) or not isinstance(conversations, (list, tuple)):
        raise TypeError(f"{where}: expected a list of conversations (each a list of messages), "
                        f"got {type(conversations).__name__}")
    for i, conv in enumerate(conversations):
        if not isinstance(conv, (list, tuple)) or not conv:
            raise ValueError(f"{where}: conversation {i} must be a non-empty list of messages")
        for j, msg in enumerate(conv):
            if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
                raise ValueError(f"{where}: conversation {i}, message {j}: needs 'role' and 'content'")
            if msg["role"] not in ("system", "user", "assistant"):
                raise ValueError(f"{where}: conversation {i}, message {j}: unknown role {msg['role']!r}")
            if not isinstance(msg["content"], str):
                raise ValueError(f"{where}: conversation {i}, message {j}: content must be a string")
    return [list(c) for c in conversations]


def check_sampling(sampling: Sampling | None, where: str) -> Sampling:
    sampling = sampling or Sampling()
    if sampling.n < 1:
        raise ValueError(f"{where}: sampling.n must be >= 1, got {sampling.n}")
    if sampling.max_new_tokens < 1:
        raise ValueError(f"{where}: sampling.max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
    if not 0.0 < sampling.top_p <= 1.0:
        raise ValueError(f"{where}: sampling.top_p must be in (0, 1], got {sampling.top_p}")
    if sampling.temperature < 0:
        raise ValueError(f"{where}: sampling.temperature must be >= 0, got {sampling.temperature}")
    return sampling
