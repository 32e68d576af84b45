"""Per-period checks of an interactive run that need a model: the upper bound and factual recall."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from membuilder import prompts
from membuilder.agents.assistant import SYSTEM, bound, fit_newest, numbered
from membuilder.agents.choice import best_option, score_options
from memgym_env.interactive.metrics import evidence_supports, new_facts, states_verbatim
from memgym_env.world.types import WorldUser


def readable_state(user: WorldUser, state: Mapping[str, str]) -> dict[str, str]:
    """{variable title: value text}: the true state as an assistant would be told it."""
    return {user.info(v).title: user.info(v).text(x) for v, x in state.items()}


def upper_bound_prompts(user: WorldUser) -> tuple[list[tuple[int, int]], list[list[dict[str, str]]]]:
    """(question, choice) keys and their prompts: the query, then only the question's
    ``required_info`` variables with that choice's values as JSON, then the numbered choices."""
    keys, convs = [], []
    for q, question in enumerate(user.qas):
        choices = [c.answer for c in question.answer_choices]
        for c, choice in enumerate(question.answer_choices):
            state = {user.info(v).title: user.info(v).text(x)
                     for v, x in zip(question.required_info, choice.state, strict=True)}
            text = prompts.render("upper_bound_choice", state=json.dumps(state, ensure_ascii=False),
                                  question=question.query, choices=numbered(choices))
            convs.append([{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}])
            keys.append((q, c))
    return keys, convs


def upper_bound_table(model, user: WorldUser) -> dict[tuple[int, int], bool]:
    """{(question, choice): does the model pick that choice when shown the choice's state}.
    AMemGym's upper bound (``eval/upperbound.py``, protocols §6): each (question, choice state) is
    asked once, in one batch, and looked up per period by ``upper_bound``."""
    keys, convs = upper_bound_prompts(user)
    labels = [[str(i) for i in range(1, len(user.qas[q].answer_choices) + 1)] for q, _ in keys]
    scores = score_options(bound(model, "upper_bound"), convs, labels)
    return {key: best_option(s) == key[1] for key, s in zip(keys, scores, strict=True)}


def upper_bound(model, user: WorldUser, period: int, table: dict[tuple[int, int], bool] | None = None) -> list[bool]:
    """Per question of ``period``: is the model right when shown the current values of the
    question's required variables? Looked up in ``upper_bound_table`` (computed when not given)."""
    table = upper_bound_table(model, user) if table is None else table
    state = user.periods[period].state
    return [table[(q, question.correct_choice(state))] for q, question in enumerate(user.qas)]


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
    """Which facts the assistant's memory supports, by one test for every assistant: the value
    written out word for word anywhere in the memory's text, else a yes/no checker model on the
    newest ``context_tokens`` of that text (a small checker leans to "no" even on a verbatim fact,
    which would put the oracle's recall at 0, hence the shortcut)."""
    if not facts:
        return []
    text = assistant.memory_text()
    flags = [states_verbatim(f["value_text"], text) for f in facts]
    ask = [i for i, ok in enumerate(flags) if not ok]
    if ask:
        memory = fit_newest(text.splitlines(), context_tokens, model.count_tokens) or "(empty)"
        convs = [[{"role": "user", "content": prompts.render("fact_check", memory=memory, fact=facts[i]["fact"])}]
                 for i in ask]
        for i, s in zip(ask, score_options(bound(model, "check"), convs, [["yes", "no"]] * len(ask)), strict=True):
            flags[i] = s[0] > s[1]
    return flags


def evidence_overlap_flags(assistant, facts: Sequence[Mapping[str, Any]]) -> list[bool] | None:
    """A MemBuilder bank's own diagnostic, apart from factual recall: an entry written from (or
    merging) a session that revealed the fact, or the Core block, holds at least half of the
    value's content words. None for a memory without a bank."""
    bank = getattr(assistant, "bank", None)
    if bank is None:
        return None
    entries = []
    for e in bank.entries():
        sources = {e.session} | {getattr(bank.get(i), "session", None) for i in e.evidence}
        entries.append((e.text, [s for s in sources if s]))
    return [evidence_supports(f["value_text"], set(f["sessions"]), entries, bank.core.text) for f in facts]
