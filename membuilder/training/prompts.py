"""Training prompts: the (session, agent) rows RL samples from, bounded in length.

A prompt that is too long is cut in its memory view, never in its instructions: first the
lowest-ranked entries of the agent's own type go, then the oldest part of the Core block, and
only as a last resort the start of the session text. The JSON instructions and the output
format stay whole, so a truncated prompt still asks for a parseable answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from membuilder.agents.constructor import render_prompt
from membuilder.ops import AGENTS

# Renders a chat prompt and counts its tokens.
PromptLength = Callable[[list[dict[str, str]]], int]


def token_counter(tokenizer) -> PromptLength:
    """Prompt length in tokens as the trainer will see it (chat template with the generation prompt)."""

    def count(messages: list[dict[str, str]]) -> int:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):  # some tokenizers return a BatchEncoding
            ids = ids["input_ids"]
        return len(ids)

    return count


def fit_prompt(agent: str, obs: Mapping[str, Any], length: PromptLength, max_tokens: int | None) -> list[dict[str, str]]:
    """``render_prompt(agent, obs)``, with the memory view shortened until it fits ``max_tokens``."""
    messages = render_prompt(agent, obs)
    if not max_tokens or length(messages) <= max_tokens:
        return messages
    obs = dict(obs)
    if agent != "core":
        entries = list(obs.get(agent) or ())
        while entries and length(messages) > max_tokens:
            entries.pop()  # the lowest-ranked entry goes first
            obs[agent] = entries
            messages = render_prompt(agent, obs)
    for field in ("core", "session"):
        text = str(obs.get(field) or "")
        while text and length(messages) > max_tokens:
            # keep the most recent part: cut a quarter of what is left from the front
            text = text[len(text) // 4 + 1:] if len(text) > 8 else ""
            obs[field] = ("..." + text) if text else ""
            messages = render_prompt(agent, obs)
    return messages


def rl_rows(session_keys: Sequence[str], observation: Callable[[str], Mapping[str, Any]],
            length: PromptLength | None = None, max_prompt_tokens: int | None = None) -> list[dict[str, Any]]:
    """The ADRPO dataset: four consecutive rows per session (Core, Episodic, Semantic, Procedural).

    Columns: ``prompt`` (chat messages), ``session_key``, ``agent``. The session-grouped sampler
    relies on a session's rows being adjacent and in ``AGENTS`` order.
    """
    rows = []
    for key in session_keys:
        obs = observation(key)
        for agent in AGENTS:
            prompt = fit_prompt(agent, obs, length, max_prompt_tokens) if length else render_prompt(agent, obs)
            rows.append({"prompt": prompt, "session_key": key, "agent": agent})
    return rows
