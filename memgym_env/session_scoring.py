"""Scoring G candidate memory writes of one session from one shared snapshot.

Every candidate gets its own fork of the snapshot (O(1)), its four outputs are applied, and the
session's questions are answered from each fork. All retrieval goes through one batched search
(forks share the snapshot's index), all answers through one batched model call, all verdicts
through another; identical prompts (two candidates that built the same memory) are asked once.
The snapshot itself never changes, so a candidate's reward cannot depend on the others.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from membuilder import answer as answering
from membuilder.memory import Applied, Hit, MemoryBank, retrieve_across
from membuilder.ops import AGENTS, parse, written_text
from membuilder.training.rewards import CandidateReward
from memgym_env import rewards as R
from memgym_env.conversation import QAItem, Session

ANSWER_MODES = ("choice", "llm", "evidence")
_WORD = re.compile(r"\w+|[^\w\s]")


def approx_tokens(text: str) -> int:
    """Word-piece count used when no answering tokenizer is loaded (evidence mode)."""
    return len(_WORD.findall(text))


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def gold_in_context(item: QAItem, context: str) -> bool:
    """Evidence mode: the gold fact (or any listed phrasing of it) appears in the context."""
    golds = [item.answer or ""] + list(item.meta.get("phrasings", []))
    ctx = _norm(context)
    for gold in golds:
        g = _norm(str(gold))
        if not g:
            continue
        if g in ctx:
            return True
        words = [w for w in g.split() if len(w) > 2]
        if len(words) >= 3 and sum(w in ctx.split() for w in words) >= 0.8 * len(words):
            return True
    return False


@dataclass
class ScoringModels:
    answerer: object | None = None  # ChatModel; needed by "choice" and "llm"
    judge: object | None = None  # ChatModel; needed by "llm"
    count_tokens: object = approx_tokens


@dataclass
class ScoredCandidate:
    reward: CandidateReward
    bank: MemoryBank  # the fork with this candidate's writes, for on-policy play
    applied: dict[str, Applied] = field(default_factory=dict)


def score_session(
    snapshot: MemoryBank,
    session: Session,
    questions: Sequence[QAItem],
    candidates: Sequence[Mapping[str, str]],
    *,
    mode: str,
    models: ScoringModels,
    expert_output: Mapping[str, str] | None = None,
    task_rewarded: bool = True,
    alpha: float = 4.0,
    lam: float = R.LAMBDA,
    answer_k: int = 10,
    length_rule: R.LengthRule = R.DEFAULT_LENGTH_RULE,
) -> list[ScoredCandidate]:
    if mode not in ANSWER_MODES:
        raise ValueError(f"answer mode {mode!r}; expected one of {ANSWER_MODES}")
    forks, applied = [], []
    for cand in candidates:
        fork = snapshot.fork()
        done = {}
        for agent in AGENTS:
            done[agent] = fork.apply(agent, cand.get(agent, "") if isinstance(cand, Mapping) else "",
                                     time=session.time, session=session.id)
        forks.append(fork)
        applied.append(done)

    rewarded = task_rewarded and bool(questions)
    verdicts: list[list[dict]] = [[] for _ in candidates]
    hits_of: list[list[list[Hit]]] = [[] for _ in candidates]
    if rewarded:
        flat = retrieve_across([f for f in forks for _ in questions], [q.question for q in questions] * len(forks), k=answer_k)
        for c in range(len(candidates)):
            hits_of[c] = flat[c * len(questions):(c + 1) * len(questions)]
        verdicts = _answer_and_judge(forks, hits_of, questions, mode, models)

    expert_tokens = {}
    for agent in AGENTS:
        text = written_text(parse(agent, expert_output[agent]).ops) if expert_output and agent in expert_output else ""
        expert_tokens[agent] = models.count_tokens(text) if text else 0

    out = []
    for c, (fork, done) in enumerate(zip(forks, applied)):
        task = sum(v["correct"] for v in verdicts[c]) / len(verdicts[c]) if rewarded else 1.0
        valid = {a: done[a].valid for a in AGENTS}
        written = {a: models.count_tokens(done[a].new_text) if done[a].new_text else 0 for a in AGENTS}
        penalty = {a: R.length_penalty(a, written[a], expert_tokens[a], length_rule) if task > 0 else 0.0 for a in AGENTS}
        counts = R.attribution_counts([h.type for h in hits] for hits in hits_of[c])
        reward = CandidateReward(
            agent_rewards={a: R.agent_reward(valid[a], task, penalty[a], lam) for a in AGENTS},
            weights=R.attribution_weights(counts, alpha),
            task_reward=task if rewarded else 0.0,
            valid=valid,
            length_penalty=penalty,
            task_rewarded=rewarded,
            info={
                "errors": {a: done[a].errors for a in AGENTS if done[a].errors},
                "warnings": {a: done[a].warnings for a in AGENTS if done[a].warnings},
                "tokens_written": written,
                "tokens_expert": expert_tokens,
                "attribution_counts": counts,
                "questions": verdicts[c],
            },
        )
        out.append(ScoredCandidate(reward, fork, done))
    return out


def _context_text(bank: MemoryBank, hits: Sequence[Hit]) -> str:
    return bank.core.text + "\n" + "\n".join(h.entry.text for h in hits)


def _answer_and_judge(forks, hits_of, questions, mode, models) -> list[list[dict]]:
    rows = [[{"question": q.question, "gold": q.answer, "answer": None, "correct": False} for q in questions]
            for _ in forks]
    if mode == "evidence":
        for c, fork in enumerate(forks):
            for i, q in enumerate(questions):
                rows[c][i]["correct"] = gold_in_context(q, _context_text(fork, hits_of[c][i]))
                rows[c][i]["answer"] = "found" if rows[c][i]["correct"] else "absent"
        return rows
    if models.answerer is None:
        raise ValueError(f"answer mode {mode!r} needs an answerer model")

    # One prompt per distinct (memory, question): candidates that wrote the same memory share it.
    unique: dict[str, tuple[list, QAItem]] = {}
    where: list[list[str]] = []
    for c, fork in enumerate(forks):
        keys = []
        for i, q in enumerate(questions):
            date = q.question_date
            use_choice = mode == "choice" and q.choices
            prompt = (answering.choice_prompt(fork.core.text, hits_of[c][i], date, q.question, q.choices) if use_choice
                      else answering.answer_prompt(fork.core.text, hits_of[c][i], date, q.question))
            key = json.dumps(prompt, ensure_ascii=False)
            unique.setdefault(key, (prompt, q))
            keys.append(key)
        where.append(keys)

    results: dict[str, tuple[str, bool]] = {}
    free = [(k, p, q) for k, (p, q) in unique.items() if not (mode == "choice" and q.choices)]
    picks = [(k, p, q) for k, (p, q) in unique.items() if mode == "choice" and q.choices]
    for (key, _, q), idx in zip(picks, answering.choose_many(models.answerer, [(p, len(q.choices)) for _, p, q in picks])):
        results[key] = (q.choices[idx], q.choices[idx] == q.answer)
    if free:
        answers = answering.answer_many(models.answerer, [p for _, p, _ in free])
        judge = models.judge or models.answerer
        from memgym_env.benchmarks.judges import judge_batch

        verdicts = judge_batch(judge, "locomo", [q for _, _, q in free], answers)
        for (key, _, _), ans, v in zip(free, answers, verdicts):
            results[key] = (ans, v.correct is True)
    for c in range(len(forks)):
        for i, key in enumerate(where[c]):
            rows[c][i]["answer"], rows[c][i]["correct"] = results[key]
    return rows
