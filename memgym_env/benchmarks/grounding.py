"""Grounding of a memory writer on a real dialogue: does what it writes come from the conversation?

The writer builds MemBuilder memory over a conversation's sessions in order, greedy, as ``memgym eval
--system membuilder`` does, and every entry it writes is checked against the session, its time and the
memory it was shown (``membuilder.memory.grounding``: grounded when 70% of its content words are there). A writer
that learned a training world's catalog instead of writing what was said scores low here, whatever it
scores in that world. ``bench/grounding_locomo.py`` runs it on LoCoMo conv-26 for any model; the
training ladder runs it on every stage's policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from membuilder.agents.constructor import MemBuilderPolicy, shown_texts
from membuilder.agents.membuilder_assistant import writer_observation
from membuilder.agents.session_windows import session_windows
from membuilder.llm.base import Sampling
from membuilder.memory import MemoryBank
from membuilder.memory.grounding import GROUNDING_RULE, Grounding, grounded_share, written_units
from membuilder.memory.ops import AGENTS, parse
from membuilder.plumbing.stats import wilson

EXAMPLES = 12  # entries kept as examples, so a reader sees what "ungrounded" looks like


def ground_writer(model, sessions: Sequence[Any], embedder, *, max_new_tokens: int, view_k: int,
                  max_prompt_tokens: int, window_tokens: int | None = None,
                  progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Memory written by ``model`` (a ``ChatModel``) over ``sessions``, one after another (a session longer than
    ``window_tokens`` window by window, as ``MemBuilderAssistant`` writes it), and the grounding of every entry:
    ``{"all": {entries, grounded, grounded_rate, mean_share, ci}, "per_agent": ..., "valid_rate": {agent: share
    of outputs with valid JSON}, "outputs": how many each agent wrote (one per session or window), ...}``."""
    policy = MemBuilderPolicy(model, Sampling(temperature=0.0, max_new_tokens=max_new_tokens),
                              max_prompt_tokens=max_prompt_tokens)
    bank = MemoryBank(embedder)
    per_agent = {a: Grounding() for a in AGENTS}
    valid = {a: 0 for a in AGENTS}
    outputs_made = 0
    examples: list[dict[str, Any]] = []
    for session in sessions:
        for window in session_windows(session.render(), window_tokens, model.count_tokens):
            obs = writer_observation(bank, window, session.time, view_k)
            sources = shown_texts(obs)
            outputs = policy.act(obs)
            outputs_made += 1
            for agent in AGENTS:
                parsed = parse(agent, outputs[agent])
                valid[agent] += parsed.valid
                if not parsed.valid:
                    continue
                for unit in written_units(parsed.ops, bank.core.text):
                    share = grounded_share(unit, sources)
                    per_agent[agent].add(share)
                    if share is not None and len(examples) < EXAMPLES:
                        examples.append({"session": session.id, "agent": agent, "text": unit[:200],
                                         "share": round(share, 3)})
            for agent in AGENTS:
                bank.apply(agent, outputs[agent], time=session.time, session=session.id)
        if progress:
            progress(1)
    total = Grounding()
    for g in per_agent.values():
        total.entries, total.grounded, total.share_sum = (total.entries + g.entries, total.grounded + g.grounded,
                                                          total.share_sum + g.share_sum)
    n = max(1, outputs_made)
    return {"all": {**total.to_dict(), "ci": wilson(total.grounded, total.entries)},
            "per_agent": {a: g.to_dict() for a, g in per_agent.items()},
            "valid_rate": {a: valid[a] / n for a in AGENTS}, "sessions": len(sessions), "outputs": outputs_made,
            "window_tokens": window_tokens, "grounding_rule": GROUNDING_RULE, "examples": examples}
