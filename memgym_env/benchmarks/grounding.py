"""Grounding of a memory writer on a real dialogue: does what it writes come from the conversation?

The writer builds MemBuilder memory over a conversation's sessions in order, greedy, as ``memgym eval
--system membuilder`` does, and every entry it writes is checked against the session, its time and the
memory it was shown (``membuilder.memory.grounding``: grounded when 70% of its content words are there). A writer
that learned a training world's catalog instead of writing what was said scores low here, whatever it
scores in that world. ``bench/grounding_locomo.py`` runs it on LoCoMo conv-26 for any model; the
training ladder runs it on every stage's policy.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from membuilder.agents.constructor import MemBuilderPolicy, build_observation, shown_texts
from membuilder.agents.session_windows import session_windows
from membuilder.llm.base import Sampling
from membuilder.memory import MemoryBank
from membuilder.memory.grounding import (
    GROUNDING_RULE,
    Grounding,
    content_words,
    grounded_share,
    share_in,
    unsaid_capitals,
    written_units,
)
from membuilder.memory.ops import AGENTS, parse
from membuilder.plumbing.stats import wilson

EXAMPLES = 12  # entries kept as examples, so a reader sees what "ungrounded" looks like
# What each written entry is checked against: what the writer was shown, and the dialogue alone
MEASURES = ("shown", "dialogue")
REASONS = 3  # commonest reasons kept per agent for its invalid outputs
_NUMBER = re.compile(r"\d+")


def ground_writer(model, sessions: Sequence[Any], embedder, *, max_new_tokens: int, view_k: int,
                  max_prompt_tokens: int, window_tokens: int | None = None,
                  progress: Callable[[int], None] | None = None, live_only: bool = False) -> dict[str, Any]:
    """Memory written by ``model`` (a ``ChatModel``) over ``sessions``, one after another (a session longer than
    ``window_tokens`` window by window, as ``MemBuilderAssistant`` writes it), and the grounding of every entry:
    ``{"all": {entries, grounded, grounded_rate, mean_share, ci}, "per_agent": ..., "dialogue": the same against
    the dialogue alone, "valid_rate": {agent: share of outputs with valid JSON}, "outputs": how many each agent
    wrote (one per session or window), "invalid": {agent: its invalid outputs, their commonest reasons, the first
    of them}, "writes": every entry written, ...}``.

    Two measures: grounded in what the writer was shown (the window, its time and the memory; the issue's
    definition), and grounded in the dialogue so far (every window and session time up to this write, not the
    memory). An invented entry copied into another memory passes the first, since the copy is in the memory
    shown; it fails the second."""
    policy = MemBuilderPolicy(model, Sampling(temperature=0.0, max_new_tokens=max_new_tokens),
                              max_prompt_tokens=max_prompt_tokens)
    bank = MemoryBank(embedder)
    per_agent = {m: {a: Grounding() for a in AGENTS} for m in MEASURES}
    valid = {a: 0 for a in AGENTS}
    invalid = {a: InvalidOutputs() for a in AGENTS}
    outputs_made = 0
    writes: list[dict[str, Any]] = []
    for session, w, window, heard in dialogue_so_far(sessions, window_tokens, model.count_tokens, progress):
        obs = build_observation(bank, window, session.time, view_k, live_only)
        sources = shown_texts(obs)
        outputs = policy.act(obs)
        outputs_made += 1
        for agent in AGENTS:
            parsed = parse(agent, outputs[agent])
            valid[agent] += parsed.valid
            if not parsed.valid:
                invalid[agent].add(parsed.errors, outputs[agent])
                continue
            for unit in written_units(parsed.ops, bank.core.text):
                shares = {"shown": grounded_share(unit, sources), "dialogue": share_in(unit, heard)}
                for m, share in shares.items():
                    per_agent[m][agent].add(share)
                if shares["shown"] is not None:
                    writes.append({"session": session.id, "window": w, "agent": agent, "text": unit,
                                   **{m: round(v, 3) for m, v in shares.items()},
                                   "unsaid": unsaid_capitals(unit, heard)})
        for agent in AGENTS:
            bank.apply(agent, outputs[agent], time=session.time, session=session.id)
    totals = {m: _total(per_agent[m].values()) for m in MEASURES}
    n = max(1, outputs_made)
    return {"all": totals["shown"], "per_agent": {a: g.to_dict() for a, g in per_agent["shown"].items()},
            "dialogue": {"all": totals["dialogue"],
                         "per_agent": {a: g.to_dict() for a, g in per_agent["dialogue"].items()}},
            "valid_rate": {a: valid[a] / n for a in AGENTS}, "sessions": len(sessions), "outputs": outputs_made,
            "invalid": {a: invalid[a].to_dict() for a in AGENTS},
            "window_tokens": window_tokens, "grounding_rule": GROUNDING_RULE, "measures": list(MEASURES),
            "examples": [{k: (v[:200] if k == "text" else v) for k, v in x.items()} for x in writes[:EXAMPLES]],
            "distinct": distinct_grounding(writes), "writes": writes}


def dialogue_so_far(sessions: Sequence[Any], window_tokens: int | None, count_tokens: Callable[[str], int],
                    progress: Callable[[int], None] | None = None) -> Iterator[tuple[Any, int, str, set[str]]]:
    """Every window a writer is shown, in order, as ``(session, window index, window, heard)``: ``heard`` is the
    content words of every window and session time up to and including this one, the dialogue an entry written
    here is checked against. ``progress(1)`` after each session."""
    heard: set[str] = set()
    for session in sessions:
        for w, window in enumerate(session_windows(session.render(), window_tokens, count_tokens)):
            heard |= content_words(window) | content_words(session.time or "")
            yield session, w, window, heard
        if progress:
            progress(1)


def with_unsaid(result: dict[str, Any], sessions: Sequence[Any], count_tokens: Callable[[str], int]) -> dict[str, Any]:
    """A ``ground_writer`` result cached before writes recorded their capitalised words never said, with them
    filled in: they depend only on the entry's text and the dialogue up to its window, both known without the
    writer, so nothing is generated again. ``count_tokens`` must be the writer's, which cut the windows."""
    if all("unsaid" in w for w in result["writes"]):
        return result
    heard_at = {(s.id, w): set(heard) for s, w, _, heard in
                dialogue_so_far(sessions, result.get("window_tokens"), count_tokens)}
    if len(heard_at) != result["outputs"]:
        raise ValueError(f"the cached writes came from {result['outputs']} windows, but these sessions cut into "
                         f"{len(heard_at)}: not the tokenizer or sessions that wrote them")
    writes = [{**w, "unsaid": unsaid_capitals(w["text"], heard_at[(w["session"], w["window"])])}
              for w in result["writes"]]
    return {**result, "writes": writes, "distinct": distinct_grounding(writes)}


class InvalidOutputs:
    """Why one agent's outputs were invalid: a validity share alone does not say whether the writer broke the JSON
    at the token limit or wrote an operation without the field it needs (an UPDATE with no ``new_memory``), which
    call for different fixes. Counts each output's first error, its numbers blanked so that one kind is one key."""

    def __init__(self) -> None:
        self.reasons: Counter[str] = Counter()
        self.example: str | None = None

    def add(self, errors: Sequence[str], text: str) -> None:
        self.reasons[_NUMBER.sub("N", errors[0]) if errors else "invalid"] += 1
        if self.example is None:
            self.example = text[:240]

    def to_dict(self) -> dict[str, Any]:
        return {"outputs": sum(self.reasons.values()),
                "reasons": [{"reason": r, "outputs": n} for r, n in self.reasons.most_common(REASONS)],
                "example": self.example}


def invalid_phrases(invalid: dict[str, Any] | None) -> list[str]:
    """One phrase per agent with invalid outputs (``ground_writer``'s ``invalid``): how many, and the reasons that
    account for most of them."""
    return [f"{a} {d['outputs']} (" + ", ".join(f"{x['outputs']} {x['reason']}" for x in d["reasons"]) + ")"
            for a in AGENTS if (d := (invalid or {}).get(a)) and d.get("outputs")]


def distinct_grounding(writes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The two measures over distinct entries (a text counted once, where it was first written, whichever memory
    holds it), and how many distinct entries are questions: a writer that copies one line into every window
    otherwise weighs that line as many times as it copied it, and a question from the dialogue stored as a
    memory (``Career options: which one do you think ...?``) has its words there without saying anything."""
    seen: set[str] = set()
    totals = {m: Grounding() for m in MEASURES}
    questions = 0
    unsaid: Counter[str] = Counter()
    named = 0  # distinct entries with a capitalised word the dialogue never said
    for w in writes:
        key = " ".join(w["text"].casefold().split())
        if key in seen:
            continue
        seen.add(key)
        for m in MEASURES:
            totals[m].add(w.get(m))
        questions += "?" in w["text"]
        named += bool(w.get("unsaid"))
        unsaid.update(w.get("unsaid") or [])
    return {**{m: {**g.to_dict(), "ci": wilson(g.grounded, g.entries)} for m, g in totals.items()},
            "entries": len(seen), "questions": questions,
            # writes cached before the check have no "unsaid": None, not a count of zero
            **({"unsaid": {"entries": named, "ci": wilson(named, len(seen)), "words": unsaid.most_common(REASONS)}}
               if all("unsaid" in w for w in writes) else {})}


def _total(groundings) -> dict[str, Any]:
    total = Grounding()
    for g in groundings:
        total.entries, total.grounded, total.share_sum = (total.entries + g.entries, total.grounded + g.grounded,
                                                          total.share_sum + g.share_sum)
    return {**total.to_dict(), "ci": wilson(total.grounded, total.entries)}
