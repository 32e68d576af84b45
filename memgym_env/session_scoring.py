"""Scoring G candidate memory writes of one session from one shared snapshot, in named stages.

1. ``apply_candidates``: every candidate gets its own fork of the snapshot (O(1)) and its four
   outputs are applied; a fork shares the snapshot's index, so nothing is copied.
2. ``retrieve_for_questions`` + ``answer_questions`` (``session_answers``): the session's
   questions are answered from each fork (one batched search, one batched model call per kind).
3. ``reward_candidates``: ``membuilder.reward`` turns validity, lengths, answers and retrieved
   memory types into r_a and the attribution weights.

An unrewarded session (reward density, or a session without questions) skips stage 2. The snapshot itself never changes, so a
candidate's reward cannot depend on the others. ``MemoryGymEnv.step``, ``score_candidates`` and
the trainer's ``SessionScorer`` all run these stages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from membuilder import reward as R
from membuilder.llm import load_chat_model
from membuilder.llm.embedders import load_embedder
from membuilder.memory import (
    MEMORY_TYPES,
    Applied,
    CoreBlock,
    EmbeddingCache,
    Hit,
    MemoryBank,
    search_stores,
)
from membuilder.ops import AGENTS, Parsed, entry_texts, parse, written_text
from memgym_env.conversation import QAItem, Session
from memgym_env.session_answers import ANSWER_MODES, ScoringModels, answer_questions

__all__ = ["ANSWER_MODES", "ScoredCandidate", "ScoringModels", "apply_candidates", "load_scoring_models",
           "retrieve_for_questions", "reward_candidates", "score_session"]

# Served answerers and judges (vLLM, SGLang) of thinking models (Qwen3) otherwise think first and
# hit the answer's token limit inside <think>: r_task would measure the limit, not the memory.
NO_THINKING = {"enable_thinking": False}


@dataclass
class ScoredCandidate:
    reward: R.CandidateReward
    bank: MemoryBank  # the fork with this candidate's writes, for on-policy play
    applied: dict[str, Applied] = field(default_factory=dict)


def load_scoring_models(config) -> tuple[EmbeddingCache, ScoringModels]:
    """The embedding cache and the answer/judge models a ``ConstructionConfig`` names."""
    def chat(spec: str):
        # Every backend renders with these (a local Qwen3 thinks first too); SmolLM2's template ignores them.
        kwargs = {"chat_template_kwargs": config.chat_template_kwargs} if config.chat_template_kwargs else {}
        return load_chat_model(spec, **kwargs)

    models = ScoringModels(judge_prompt=config.judge_prompt, answer_max_tokens=config.answer_max_tokens,
                           judge_max_tokens=config.judge_max_tokens)
    if config.answer_mode != "evidence":
        models.answerer = chat(config.answerer)
        if config.answer_mode == "llm" and config.judge and config.judge != config.answerer:
            models.judge = chat(config.judge)
    return EmbeddingCache(load_embedder(config.embedder)), models


def token_counter(models: ScoringModels):
    """Lengths are counted with the answerer's tokenizer where one is loaded."""
    return getattr(models.answerer, "count_tokens", None) or R.approx_tokens


def apply_candidates(snapshot: MemoryBank, session: Session,
                     candidates: Sequence[Mapping[str, str]]) -> tuple[list[MemoryBank], list[dict[str, Applied]]]:
    """Stage 1: each candidate's memory, the snapshot plus the candidate's four outputs applied.

    G rollouts of one prompt repeat themselves, so work is shared, never the result: an output
    written by several candidates is parsed once; every new entry of every candidate is embedded
    in one batch; candidates with the same Episodic, Semantic and Procedural outputs write those
    entries once, into one fork, and read it with their own Core block (``MemoryBank.with_core``:
    the store is shared, so fork a returned bank before writing into it). Core edits touch only
    the Core block and entry writes only the store, so applying them apart gives the same memory,
    entry ids included, as applying all four outputs to one fork in order.
    """
    outputs = [cand if isinstance(cand, Mapping) else {} for cand in candidates]
    parsed: dict[tuple[str, object], Parsed] = {}
    for out in outputs:
        for a in AGENTS:
            text = out.get(a, "")
            key = (a, text if isinstance(text, str) else repr(text))
            if key not in parsed:
                parsed[key] = parse(a, text)
    keys = [{a: (a, o.get(a, "") if isinstance(o.get(a, ""), str) else repr(o.get(a, ""))) for a in AGENTS}
            for o in outputs]
    written = [t for p in parsed.values() if p.valid and p.agent in MEMORY_TYPES for t in entry_texts(p.ops)]
    if written:
        snapshot.cache.embed(written)  # one embedding batch for all candidates' new entries

    stores: dict[tuple, tuple[MemoryBank, dict[str, Applied]]] = {}
    cores: dict[tuple, tuple[CoreBlock, Applied]] = {}
    forks, applied = [], []
    for key in keys:
        entries_key = tuple(key[a] for a in MEMORY_TYPES)
        if entries_key not in stores:
            fork = snapshot.fork()
            stores[entries_key] = fork, {a: fork.apply_parsed(parsed[key[a]], time=session.time, session=session.id)
                                         for a in MEMORY_TYPES}
        if key["core"] not in cores:
            core_bank = snapshot.fork()  # O(1); only its Core block is written and kept
            done = core_bank.apply_parsed(parsed[key["core"]], time=session.time, session=session.id)
            cores[key["core"]] = core_bank.core, done
        fork, entry_done = stores[entries_key]
        core, core_done = cores[key["core"]]
        forks.append(fork.with_core(core.copy()))
        applied.append({"core": core_done, **entry_done})
    return forks, applied


def retrieve_for_questions(forks: Sequence[MemoryBank], questions: Sequence[QAItem], k: int) -> list[list[list[Hit]]]:
    """Stage 2a: each fork's top-k for each question, in one batched search over the shared snapshot.

    Forks that share a store (candidates with the same entry writes) read it once and get the
    same hit lists.
    """
    if not forks or not questions:
        return [[] for _ in forks]
    first: dict[int, int] = {}  # id(store) -> index of its first reader
    for c, fork in enumerate(forks):
        first.setdefault(id(fork.store), c)
    readers = list(first.values())
    vectors = forks[0].cache.embed([q.question for q in questions])
    flat = search_stores([forks[c].store for c in readers for _ in questions], np.tile(vectors, (len(readers), 1)), k)
    n = len(questions)
    hits_of = {c: flat[j * n:(j + 1) * n] for j, c in enumerate(readers)}
    return [hits_of[first[id(fork.store)]] for fork in forks]


def reward_candidates(applied: Sequence[Mapping[str, Applied]], answers: Sequence[Sequence[dict]] | None,
                      hits_of: Sequence[Sequence[Sequence[Hit]]] | None, expert_output: Mapping[str, str] | None,
                      *, count_tokens=R.approx_tokens, lam: float = R.LAMBDA, alpha: float = 4.0,
                      rule: R.LengthRule = R.DEFAULT_LENGTH_RULE) -> list[R.CandidateReward]:
    """Stage 3: r_a and attribution weights per candidate. ``answers`` None = an unrewarded session."""
    expert_text = {a: written_text(parse(a, expert_output[a]).ops) if expert_output and a in expert_output else ""
                   for a in AGENTS}
    tokens_expert = R.written_tokens(expert_text, count_tokens)
    tokens: dict[str, int] = {}  # candidates repeat each other's texts: each is counted once

    def count(text: str) -> int:
        if text not in tokens:
            tokens[text] = count_tokens(text)
        return tokens[text]

    counts_of: dict[int, dict[str, int]] = {}  # candidates sharing a store share their hit lists
    out = []
    for c, done in enumerate(applied):
        rows = answers[c] if answers is not None else []
        task = sum(r["correct"] for r in rows) / len(rows) if answers is not None else None
        counts = None
        if hits_of is not None:
            key = id(hits_of[c])
            if key not in counts_of:
                counts_of[key] = R.attribution_counts([h.type for h in hits] for hits in hits_of[c])
            counts = counts_of[key]
        out.append(R.candidate_reward(
            {a: done[a].valid for a in AGENTS}, R.written_tokens({a: done[a].new_text for a in AGENTS}, count),
            tokens_expert, task_reward=task, counts=counts, lam=lam, alpha=alpha, rule=rule,
            info={"errors": {a: done[a].errors for a in AGENTS if done[a].errors},
                  "warnings": {a: done[a].warnings for a in AGENTS if done[a].warnings},
                  "questions": rows,
                  "answers_cut": sum(r.get("answer_cut", False) for r in rows),
                  "verdicts_cut": sum(r.get("verdict_cut", False) for r in rows)}))
    return out


def score_session(snapshot: MemoryBank, session: Session, questions: Sequence[QAItem],
                  candidates: Sequence[Mapping[str, str]], *, mode: str, models: ScoringModels,
                  expert_output: Mapping[str, str] | None = None, task_rewarded: bool = True, alpha: float = 4.0,
                  lam: float = R.LAMBDA, answer_k: int = 10) -> list[ScoredCandidate]:
    """All three stages for G candidates of one session."""
    if mode not in ANSWER_MODES:
        raise ValueError(f"answer mode {mode!r}; expected one of {ANSWER_MODES}")
    forks, applied = apply_candidates(snapshot, session, candidates)
    answers = hits_of = None
    if task_rewarded and questions:  # a session without questions is scored as an unrewarded one
        hits_of = retrieve_for_questions(forks, questions, answer_k)
        answers = answer_questions(forks, hits_of, questions, mode, models)
    rewards = reward_candidates(applied, answers, hits_of, expert_output, count_tokens=token_counter(models),
                                lam=lam, alpha=alpha)
    return [ScoredCandidate(r, f, a) for r, f, a in zip(rewards, forks, applied, strict=True)]
