"""The one interface every language model in MemGym is used through.

The policy, the answer model, the judge and the user simulator are all ``ChatModel``s. Calls are
batched: environments score many candidates in one ``generate`` so a GPU engine (vLLM) or a
server with concurrency sees large batches.
"""

from __future__ import annotations

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

    def add(self, completions: list[Completion], conversations: int) -> None:
        self.calls += 1
        self.conversations += conversations
        self.prompt_tokens += sum(c.prompt_tokens for c in completions)
        self.completion_tokens += sum(c.completion_tokens for c in completions)

    def to_dict(self) -> dict[str, int]:
        return dict(calls=self.calls, conversations=self.conversations,
                    prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens)


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
