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
            length: PromptLength | None = None, max_prompt_tokens: int | None = None,
            agents: Sequence[str] = AGENTS) -> list[dict[str, Any]]:
    """The RL dataset, for ADRPO and a plain GRPO trainer alike: one row per (session, agent), a
    session's rows consecutive and in the order of ``agents`` (ADRPO's session-grouped sampler
    relies on it; ADRPO trains all four).

    Columns: ``prompt`` (chat messages), ``session_key``, ``agent``. A subset of agents trains
    those alone (the reward has the expert write for the others). With ``length`` a prompt longer
    than ``max_prompt_tokens`` loses memory-view entries first, never instructions.
    """
    unknown = [a for a in agents if a not in AGENTS]
    if unknown or not agents:
        raise ValueError(f"agents must be a non-empty subset of {list(AGENTS)}, got {list(agents)}")
    rows = []
    for key in session_keys:
        obs = observation(key)
        for agent in agents:
            prompt = fit_prompt(agent, obs, length, max_prompt_tokens) if length else render_prompt(agent, obs)
            rows.append({"prompt": prompt, "session_key": key, "agent": agent})
    return rows
