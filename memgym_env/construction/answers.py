"""Answering and grading a session's questions from each candidate's memory (MemoryGym-v0's r_task).

Three modes: ``evidence`` (no model: is the gold fact in the context the answerer would read; for a
question whose gold is a date, ``meta["about"]`` names the value the date is about and one line
of Core or one retrieved entry must hold both: several facts share a session date, so a bare date
would count every line of that session),
``choice`` (the answerer picks an option by log-probability) and ``llm`` (the answerer writes an
answer, a judge grades it with a named judge prompt). Identical prompts (two candidates that
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
from memgym_env.conversation import QAItem

ANSWER_MODES = ("choice", "llm", "evidence")


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


def answer_questions(forks: Sequence[MemoryBank], hits_of: Sequence[Sequence[Sequence[Hit]]],
                     questions: Sequence[QAItem], mode: str, models: ScoringModels) -> list[list[dict]]:
    """One row per (candidate, question): question, gold, answer given, correct, and whether the
    answer or the verdict stopped at its token limit."""
    rows = [[{"question": q.question, "gold": q.answer, "answer": None, "correct": False,
              "answer_cut": False, "verdict_cut": False}
             for q in questions] for _ in forks]
    if mode == "evidence":
        _evidence_rows(forks, hits_of, questions, rows)
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
