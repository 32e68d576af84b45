"""Fitting prompts to a model's context, so that no model call fails on a prompt that is too long.

Two layers, each counting what it cut:

- The callers that know their prompt's structure cut it first, where it costs least: the memory
  constructor keeps what a writer must edit longest (its own top-ranked entries, the Core lines the
  session speaks of) and cuts the start of the session last
  (``membuilder.agents.constructor.fit_prompt``), with its budget taken
  from the model's ``context_length`` less the completion's tokens.
- Every backend then checks each rendered prompt against its own context before the engine sees
  it (``fit_conversation``). A prompt still too long loses the middle of its longest message:
  instructions sit at the start of a prompt and the question or output format at its end, so
  the middle (retrieved memory, dialogue) is what a generic cut can best spare. The cut is booked
  in the model's usage ledger (``prompts_cut``), so a run's report says how many prompts it
  shortened, and vLLM never refuses a request (an engine's ``max_model_len`` check used to end a
  LoCoMo build on its 18th session).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from membuilder.llm.base import ChatMessages

MARK = "\n[...]\n"  # what stands where text was cut, so the model can see the gap


class PromptTooLong(ValueError):
    """Even with every message cut to its bare minimum the prompt does not fit."""


def model_context_length(model: Any, default: int | None = 8192) -> int | None:
    """The context length of a chat model: its ``context_length``, else its transformers config's
    ``max_position_embeddings``, else the tokenizer's ``model_max_length`` when plausible, else
    ``default``."""
    value = getattr(model, "context_length", None)
    config = getattr(getattr(model, "model", None), "config", None)
    for candidate in (value, getattr(config, "max_position_embeddings", None),
                      getattr(getattr(model, "tokenizer", None), "model_max_length", None)):
        if isinstance(candidate, int) and not isinstance(candidate, bool) and 1 < candidate < 10_000_000:
            return candidate
    return default


def prompt_budget(context_length: int | None, reserve: int) -> int | None:
    """Tokens a prompt may take when ``reserve`` tokens must follow it (the completion, or the
    longest choice scored after it). A reserve of the whole context leaves the prompt half of it,
    not nothing: the caller's completion is then cut short instead (the engine stops at its
    context), which is better than no call at all."""
    if not context_length:
        return None
    return max(context_length - max(0, reserve), context_length // 2)


def _cut_middle(text: str, drop: int) -> str:
    """``text`` without ``drop`` characters from its middle (a marker stands in their place)."""
    if drop >= len(text):
        return MARK.strip()
    keep = len(text) - drop
    head = keep // 2
    return text[:head] + MARK + text[len(text) - (keep - head):]


def fit_conversation(conversation: ChatMessages, length: Callable[[ChatMessages], int],
                     max_tokens: int) -> tuple[ChatMessages, bool]:
    """``conversation`` cut until ``length(conversation) <= max_tokens``; and whether it was cut.

    The longest message loses a middle span each round, sized from how far over the budget the
    prompt is (with a margin, since characters per token vary), so a few renders suffice. Raises
    ``PromptTooLong`` when nothing more can be cut."""
    over = length(conversation) - max_tokens
    if over <= 0:
        return conversation, False
    messages = [dict(m) for m in conversation]
    for _ in range(64):
        longest = max(range(len(messages)), key=lambda i: len(messages[i]["content"]))
        text = messages[longest]["content"]
        if len(text) <= len(MARK) + 16:
            break
        # Byte-level tokenizers average 3-4 characters a token on prose; cut 4 per token over plus a
        # tenth of the message, so the loop converges in a handful of rounds without overshooting much.
        drop = min(len(text) - len(MARK), 4 * over + len(text) // 10 + 16)
        messages[longest]["content"] = _cut_middle(text, drop)
        over = length(messages) - max_tokens
        if over <= 0:
            return messages, True
    raise PromptTooLong(f"a prompt of {length(conversation)} tokens cannot be cut to {max_tokens}: "
                        f"its messages are already at their minimum")


def fit_rendered(conversations: list[ChatMessages], render: Callable[[ChatMessages], list[int]],
                 max_tokens: int | None) -> tuple[list[ChatMessages], list[list[int]], int]:
    """Each conversation fitted to ``max_tokens`` by its rendered length (the chat template's exact
    tokens); the conversations, their token ids and how many were cut."""
    if not max_tokens:
        return conversations, [render(c) for c in conversations], 0
    out, ids, cut = [], [], 0
    for conv in conversations:
        tokens = render(conv)
        if len(tokens) > max_tokens:
            conv, _ = fit_conversation(conv, lambda c: len(render(c)), max_tokens)
            tokens, cut = render(conv), cut + 1
        out.append(conv)
        ids.append(tokens)
    return out, ids, cut
