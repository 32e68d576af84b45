"""Answering and grading a session's questions from each candidate's memory (MemoryGym-v0's r_task).

Four modes: ``evidence`` (no model: is the gold fact in the context the answerer would read; for a
question whose gold is a date, ``meta["about"]`` names the value the date is about and one line
of Core or one retrieved entry must hold both: several facts share a session date, so a bare date
would count every line of that session),
``stale`` (evidence, and the memory shown tracks the change: it states the current value of every
variable the question needs and no superseded one as current; ``state_values``),
``choice`` (the answerer picks an option by log-probability) and ``llm`` (the answerer writes an
answer, a judge grades it with a named judge prompt).

Whatever the mode, each question's row also names the memory that held its evidence
(``evidence_type``: the type of the best-ranked live entry shown that holds it, else ``core``
when the Core block does, else None), which the ``evidence`` attribution rule counts. Identical prompts (two candidates that
built the same memory) are asked once, and each kind of call is one batch for all candidates.

An answer or verdict that stops at its token limit is *cut*: it is graded as given (usually
wrong), and counted (``answer_cut`` / ``verdict_cut`` on the question, ``answers_cut`` / ``verdicts_cut`` in the reward's
info) so a run's report can say that r_task measured the token limit, not the memory. Thinking
models (Qwen3) cut this way when their chat template is left in thinking mode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from membuilder.agents import answer as answering
from membuilder.llm.base import Sampling
from membuilder.memory import Hit, MemoryBank
from memgym_env.benchmarks.judges import judge_batch
from memgym_env.construction.state_values import question_variables, stale_ok, states_current
from memgym_env.conversation import QAItem

ANSWER_MODES = ("choice", "llm", "evidence", "stale")
MODEL_FREE_MODES = ("evidence", "stale")


@dataclass
class ScoringModels:
    """The models that answer and grade; None where the answer mode needs none."""

    answerer: object | None = None  # ChatModel; needed by "choice" and "llm"
    judge: object | None = None  # ChatModel; needed by "llm" (None: the answerer judges)
    judge_prompt: str = "locomo"  # which judge prompt of memgym_env.benchmarks.judges grades "llm" answers
    answer_max_tokens: int = 48
    judge_max_tokens: int = 24


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def gold_in_context(item: QAItem, context: str) -> bool:
    """Evidence mode: the gold fact (or any listed phrasing of it) appears in the context; a date
    about a value (``meta["about"]``) counts only on a line that also holds the value."""
    return _found(_golds(item), _about(item), context.splitlines())


def _about(item: QAItem) -> list[str]:
    about = item.meta.get("about")
    return [_norm(str(about))] if about and _norm(str(about)) else []


def _found(golds: Sequence[str], about: Sequence[str], units: Sequence[str], norm=None) -> bool:
    """The golds in the joined ``units``; with ``about``, both in one unit (a line or an entry)."""
    norm = norm or _norm
    if not about:
        return _golds_in(golds, " ".join(x for x in (norm(u) for u in units) if x))
    return any(_golds_in(golds, n) and _golds_in(about, n) for n in (norm(u) for u in units))


def _golds(item: QAItem) -> list[str]:
    golds = [_norm(str(g)) for g in [item.answer or ""] + list(item.meta.get("phrasings", []))]
    return [g for g in golds if g]


def _golds_in(golds: Sequence[str], ctx: str) -> bool:
    ctx_words = None
    for g in golds:
        if g in ctx:
            return True
        words = [w for w in g.split() if len(w) > 2]
        if len(words) >= 3:
            ctx_words = set(ctx.split()) if ctx_words is None else ctx_words
            if sum(w in ctx_words for w in words) >= 0.8 * len(words):
                return True
    return False


def _evidence_rows(forks: Sequence[MemoryBank], hits_of: Sequence[Sequence[Sequence[Hit]]],
                   questions: Sequence[QAItem], rows: list[list[dict]]) -> None:
    # Candidates often read the same Core and the same hits: each distinct context is checked
    # once, and each text normalised once (normalising the parts and joining them equals
    # normalising the joined context: no word spans the line breaks between them).
    golds = [_golds(q) for q in questions]
    abouts = [_about(q) for q in questions]
    normed: dict[str, str] = {}

    def norm(t: str) -> str:
        return normed[t] if t in normed else normed.setdefault(t, _norm(t))

    found: dict[tuple, bool] = {}
    for c, fork in enumerate(forks):
        for i in range(len(questions)):
            texts = (fork.core.text, *(h.entry.text for h in hits_of[c][i]))
            key = (i, texts)
            if key not in found:
                units = (*fork.core.text.splitlines(), *texts[1:]) if abouts[i] else texts
                found[key] = _found(golds[i], abouts[i], units, norm)
            rows[c][i]["correct"] = found[key]
            rows[c][i]["answer"] = "found" if found[key] else "absent"


def _live_units(fork: MemoryBank, hits: Sequence[Hit]) -> tuple[tuple[str, str], ...]:
    """(type, text) of what the answerer is shown that is current memory: Core, then the live hits in rank order."""
    dead = fork.superseded()
    return (("core", fork.core.text), *((h.type, h.entry.text) for h in hits if h.id not in dead))


def _stale_rows(forks: Sequence[MemoryBank], hits_of: Sequence[Sequence[Sequence[Hit]]],
                questions: Sequence[QAItem], rows: list[list[dict]]) -> None:
    """Stale mode: an evidence-correct answer counts only where the memory shown tracks the change."""
    variables = [question_variables(q) for q in questions]
    checked: dict[tuple, bool] = {}
    for c, fork in enumerate(forks):
        for i in range(len(questions)):
            row = rows[c][i]
            if not row["correct"] or not any(v.changed for v in variables[i]):
                continue
            units = _live_units(fork, hits_of[c][i])
            key = (i, units)
            if key not in checked:
                checked[key] = stale_ok(variables[i], units)
            if not checked[key]:
                row["correct"], row["answer"] = False, "stale"


def _evidence_types(forks: Sequence[MemoryBank], hits_of: Sequence[Sequence[Sequence[Hit]]],
                    questions: Sequence[QAItem], rows: list[list[dict]]) -> None:
    """Each row's ``evidence_type``, the memory that held the question's evidence, and
    ``evidence_in``, every memory that held it.

    A unit holds the evidence when the gold (with its ``about`` value) is in that unit alone, or
    when it states the current value of every variable the question needs. The live entries shown
    are tried in rank order, then the Core block: Core is always in the answerer's context, so it
    is named where no retrieved entry holds the answer (a fact only Core kept, or facts spread
    over its lines). Ranking Core lines beside entries by similarity was tried: an ideal Core holds
    every current fact in a short line that matches the question best, so it named Core in 383 of
    389 oracle sessions, as constant as the retrieval rule's Semantic.
    """
    golds = [_golds(q) for q in questions]
    abouts = [_about(q) for q in questions]
    variables = [question_variables(q) for q in questions]
    normed: dict[str, str] = {}
    held: dict[tuple[int, str], bool] = {}

    def norm(t: str) -> str:
        return normed[t] if t in normed else normed.setdefault(t, _norm(t))

    def holds(i: int, text: str) -> bool:
        key = (i, text)
        if key not in held:
            held[key] = bool(text) and ((bool(golds[i]) and _found(golds[i], abouts[i], [text], norm)) or (
                bool(variables[i]) and all(states_current(text, v) for v in variables[i])))
        return held[key]

    found: dict[tuple, tuple[str | None, list[str]]] = {}
    for c, fork in enumerate(forks):
        for i in range(len(questions)):
            units = _live_units(fork, hits_of[c][i])
            key = (i, units)
            if key not in found:
                holders = [kind for kind, text in (*units[1:], units[0]) if holds(i, text)]
                found[key] = (holders[0] if holders else None), sorted(set(holders))
            rows[c][i]["evidence_type"], rows[c][i]["evidence_in"] = found[key]


def answer_questions(forks: Sequence[MemoryBank], hits_of: Sequence[Sequence[Sequence[Hit]]],
                     questions: Sequence[QAItem], mode: str, models: ScoringModels) -> list[list[dict]]:
    """One row per (candidate, question): question, gold, answer given, correct, whether the
    answer or the verdict stopped at its token limit, and the memory that held the evidence."""
    rows = [[{"question": q.question, "gold": q.answer, "answer": None, "correct": False,
              "answer_cut": False, "verdict_cut": False}
             for q in questions] for _ in forks]
    _evidence_types(forks, hits_of, questions, rows)
    if mode in MODEL_FREE_MODES:
        _evidence_rows(forks, hits_of, questions, rows)
        if mode == "stale":
            _stale_rows(forks, hits_of, questions, rows)
        return rows
    if mode not in ANSWER_MODES:
        raise ValueError(f"answer mode {mode!r}; expected one of {ANSWER_MODES}")
    if models.answerer is None:
        raise ValueError(f"answer mode {mode!r} needs an answerer model")

    # One prompt per distinct (memory, question): candidates that wrote the same memory share it.
    unique: dict[str, tuple[list, QAItem]] = {}
    where: list[list[str]] = []
    for c, fork in enumerate(forks):
        keys = []
        for i, q in enumerate(questions):
            use_choice = mode == "choice" and q.choices
            prompt = (answering.choice_prompt(fork.core.text, hits_of[c][i], q.question_date, q.question, q.choices)
                      if use_choice else answering.answer_prompt(fork.core.text, hits_of[c][i], q.question_date,
                                                                 q.question))
            key = json.dumps(prompt, ensure_ascii=False)
            unique.setdefault(key, (prompt, q))
            keys.append(key)
        where.append(keys)

    results: dict[str, tuple[str, bool, bool, bool]] = {}
    picks = [(k, p, q) for k, (p, q) in unique.items() if mode == "choice" and q.choices]
    free = [(k, p, q) for k, (p, q) in unique.items() if not (mode == "choice" and q.choices)]
    for (key, _, q), idx in zip(picks, answering.choose_many(models.answerer, [(p, len(q.choices)) for _, p, q in picks]),
                                strict=True):
        results[key] = (q.choices[idx], q.choices[idx] == q.answer, False, False)
    if free:
        outs = models.answerer.generate([p for _, p, _ in free],
                                        Sampling(temperature=0.0, max_new_tokens=models.answer_max_tokens))
        answers = [o.text.strip() for o in outs]
        verdicts = judge_batch(models.judge or models.answerer, models.judge_prompt, [q for _, _, q in free], answers,
                               max_new_tokens=models.judge_max_tokens)
        for (key, _, _), out, ans, v in zip(free, outs, answers, verdicts, strict=True):
            results[key] = (ans, v.correct is True, out.finish_reason == "length", v.cut)
    for c in range(len(forks)):
        for i, key in enumerate(where[c]):
            row = rows[c][i]
            row["answer"], row["correct"], row["answer_cut"], row["verdict_cut"] = results[key]
    return rows
