"""Per-period checks of an interactive run that need a model: the upper bound and factual recall."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from membuilder import prompts
from membuilder.agents.assistant import bound, fit_newest
from membuilder.agents.choice import score_options
from membuilder.agents.oracle import OracleAssistant
from memgym_env.interactive.env import QUESTION, choice_or_random, eval_items
from memgym_env.interactive.metrics import evidence_supports, new_facts, states_verbatim
from memgym_env.world.types import WorldUser


def readable_state(user: WorldUser, state: Mapping[str, str]) -> dict[str, str]:
    """{variable title: value text}: the true state as an assistant would be told it."""
    return {user.info(v).title: user.info(v).text(x) for v, x in state.items()}


def upper_bound(model, user: WorldUser, period: int, seed: int) -> list[bool]:
    """Per question: is the model right when handed the true state? (the oracle's own prompt)."""
    end = user.periods[period].period_end
    oracle = OracleAssistant(model)
    oracle.answer_purpose = "upper_bound"
    oracle.reset(user.id)
    oracle.observe([], time=end, session_id="truth", facts=readable_state(user, user.periods[period].state))
    items = [it for it in eval_items(user, period, probes=False) if it.kind == QUESTION]
    outs = oracle.answer([it.public() for it in items], end)
    return [choice_or_random(o, len(it.choices), f"{seed}-{user.id}-{period}-{it.id}")[0] == it.correct
            for o, it in zip(outs, items, strict=True)]


def period_facts(user: WorldUser, period: int) -> list[dict[str, Any]]:
    """The state facts new at ``period``: variable, readable text, and the sessions that revealed them."""
    states = [p.state for p in user.periods]
    out = []
    for var, value in new_facts(states, period).items():
        info = user.info(var)
        sessions = {r.id for r in user.sessions() if r.period == period and r.session.exposed_states.get(var) == value}
        out.append({"variable": var, "fact": f"{info.title}: {info.text(value)}", "value_text": info.text(value),
                    "sessions": sorted(sessions)})
    return out


def factual_recall_flags(assistant, model, facts: Sequence[Mapping[str, Any]], context_tokens: int) -> list[bool]:
    """Which facts the assistant's memory supports: evidence matching for a MemBuilder bank; for
    every other memory, the value written out verbatim, else a yes/no checker model (a small
    checker leans to "no" even on a verbatim fact, which would put the oracle's recall at 0)."""
    if not facts:
        return []
    bank = getattr(assistant, "bank", None)
    if bank is not None:
        entries = []
        for e in bank.entries():
            sources = {e.session} | {getattr(bank.get(i), "session", None) for i in e.evidence}
            entries.append((e.text, [s for s in sources if s]))
        return [evidence_supports(f["value_text"], set(f["sessions"]), entries, bank.core.text) for f in facts]
    memory = fit_newest(assistant.memory_text().splitlines(), context_tokens, model.count_tokens) or "(empty)"
    flags = [states_verbatim(f["value_text"], memory) for f in facts]
    ask = [i for i, ok in enumerate(flags) if not ok]
    if ask:
        convs = [[{"role": "user", "content": prompts.render("fact_check", memory=memory, fact=facts[i]["fact"])}]
                 for i in ask]
        for i, s in zip(ask, score_options(bound(model, "check"), convs, [["yes", "no"]] * len(ask)), strict=True):
            flags[i] = s[0] > s[1]
    return flags
