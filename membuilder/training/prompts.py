"""Training prompts: the (session, agent) rows RL samples from, bounded in length by
``fit_prompt`` (``membuilder.agents.constructor``), as every user of the constructor's prompts is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from membuilder.agents.constructor import PromptLength, fit_prompt, render_prompt
from membuilder.memory.ops import AGENTS


def token_counter(tokenizer) -> PromptLength:
    """Prompt length in tokens as the trainer will see it (chat template with the generation prompt)."""

    def count(messages: list[dict[str, str]]) -> int:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):  # some tokenizers return a BatchEncoding
            ids = ids["input_ids"]
        return len(ids)

    return count


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
