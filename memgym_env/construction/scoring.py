"""Scoring G candidate memory writes of one session from one shared snapshot, in named stages.

1. ``apply_candidates``: every candidate gets its own fork of the snapshot (O(1)) and its four
   outputs are applied; a fork shares the snapshot's index, so nothing is copied.
2. ``retrieve_for_questions`` + ``answer_questions`` (``answers``): the session's
   questions are answered from each fork (one batched search, one batched model call per kind).
3. ``reward_candidates``: ``membuilder.reward`` turns validity, lengths, answers and retrieved
   memory types into r_a and the attribution weights.

An unrewarded session (reward density, or a session without questions) skips stage 2. The
snapshot itself never changes, so a candidate's reward cannot depend on the others. ``MemoryGymEnv.step``, ``score_candidates`` and
the trainer's ``SessionScorer`` all run these stages.

``SessionScorer`` holds MemoryGym-v0's sessions as a ``CandidateScorer`` for the trainer (and
for policy evaluation). Each session's snapshot is the expert's memory just before it (MemBuilder's training setup),
kept as an O(1) fork, so any session can be scored in any order. It is built from the same
public functions as the environment (``load_episodes``, ``load_scoring_models``,
``expert_snapshots``) and scores with the same stages (``score_session``), so a trainer's reward
and an env step's reward for the same writes are the same number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from membuilder import reward as R
from membuilder.agents.constructor import build_observation
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
from membuilder.memory.ops import AGENTS, Parsed, entry_texts, parse, written_text
from membuilder.reward import CandidateReward
from memgym_env.construction.actions import noop_action
from memgym_env.construction.answers import ANSWER_MODES, MODEL_FREE_MODES, ScoringModels, answer_questions
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.episodes import Episode, expert_snapshots, load_episodes
from memgym_env.conversation import QAItem, Session

__all__ = ["ANSWER_MODES", "SESSION_PICKS", "ScoredCandidate", "pick_sessions", "ScoringModels", "apply_candidates", "load_scoring_models",
           "retrieve_for_questions", "reward_candidates", "score_session", "SessionScorer"]

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
    if config.answer_mode not in MODEL_FREE_MODES:
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


def retrieve_for_questions(forks: Sequence[MemoryBank], questions: Sequence[QAItem], k: int,
                           live_only: bool = False) -> list[list[list[Hit]]]:
    """Stage 2a: each fork's top-k for each question, in one batched search over the shared snapshot.

    Forks that share a store (candidates with the same entry writes) read it once and get the
    same hit lists. ``live_only``: entries an UPDATE or MERGE replaced are left out (the live view).
    """
    if not forks or not questions:
        return [[] for _ in forks]
    first: dict[int, int] = {}  # id(store) -> index of its first reader
    for c, fork in enumerate(forks):
        first.setdefault(id(fork.store), c)
    readers = list(first.values())
    vectors = forks[0].cache.embed([q.question for q in questions])
    flat = search_stores([forks[c].store for c in readers for _ in questions], np.tile(vectors, (len(readers), 1)), k,
                         live_only=live_only)
    n = len(questions)
    hits_of = {c: flat[j * n:(j + 1) * n] for j, c in enumerate(readers)}
    return [hits_of[first[id(fork.store)]] for fork in forks]


def reward_candidates(applied: Sequence[Mapping[str, Applied]], answers: Sequence[Sequence[dict]] | None,
                      hits_of: Sequence[Sequence[Sequence[Hit]]] | None, expert_output: Mapping[str, str] | None,
                      *, count_tokens=R.approx_tokens, lam: float = R.LAMBDA, alpha: float = R.ALPHA,
                      rule: R.LengthRule = R.DEFAULT_LENGTH_RULE, attribution: str = "retrieval",
                      quote_miss: str = "add") -> list[R.CandidateReward]:
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
            tokens_expert, task_reward=task, counts=counts, lam=lam, alpha=alpha, rule=rule, attribution=attribution,
            evidence_types=[r.get("evidence_type") for r in rows if r["correct"]],
            quote_misses={a: done[a].quoted_missing for a in AGENTS}, quote_miss=quote_miss,
            info={"errors": {a: done[a].errors for a in AGENTS if done[a].errors},
                  "warnings": {a: done[a].warnings for a in AGENTS if done[a].warnings},
                  "quoted": {a: [done[a].quoted, done[a].quoted_missing] for a in AGENTS},
                  "questions": rows,
                  "answers_cut": sum(r.get("answer_cut", False) for r in rows),
                  "verdicts_cut": sum(r.get("verdict_cut", False) for r in rows)}))
    return out


def score_session(snapshot: MemoryBank, session: Session, questions: Sequence[QAItem],
                  candidates: Sequence[Mapping[str, str]], *, mode: str, models: ScoringModels,
                  expert_output: Mapping[str, str] | None = None, task_rewarded: bool = True, alpha: float = R.ALPHA,
                  lam: float = R.LAMBDA, answer_k: int = 10, live_view: bool = False,
                  attribution: str = "retrieval", quote_miss: str = "add") -> list[ScoredCandidate]:
    """All three stages for G candidates of one session (``live_view``: the answerer reads live entries only)."""
    if mode not in ANSWER_MODES:
        raise ValueError(f"answer mode {mode!r}; expected one of {ANSWER_MODES}")
    forks, applied = apply_candidates(snapshot, session, candidates)
    answers = hits_of = None
    if task_rewarded and questions:  # a session without questions is scored as an unrewarded one
        hits_of = retrieve_for_questions(forks, questions, answer_k, live_only=live_view)
        answers = answer_questions(forks, hits_of, questions, mode, models)
    rewards = reward_candidates(applied, answers, hits_of, expert_output, count_tokens=token_counter(models),
                                lam=lam, alpha=alpha, attribution=attribution, quote_miss=quote_miss)
    return [ScoredCandidate(r, f, a) for r, f, a in zip(rewards, forks, applied, strict=True)]


SESSION_PICKS = ("first", "every_period")


def pick_sessions(periods: Sequence[int], n: int | None, pick: str = "first") -> list[int]:
    """Indices of the sessions a scorer keeps, given each session's period: the first ``n``
    (``first``), or ``n`` drawn round-robin over the periods, each period's earliest first
    (``every_period``: a user's first sessions start from an empty memory, so a set of first
    sessions only measures writing from nothing). ``n`` None keeps them all."""
    if pick not in SESSION_PICKS:
        raise ValueError(f"session pick {pick!r}; expected one of {SESSION_PICKS}")
    everything = list(range(len(periods)))
    if n is None or n >= len(periods):
        return everything
    if pick == "first":
        return everything[:n]
    by_period: dict[int, list[int]] = {}
    for j, p in enumerate(periods):
        by_period.setdefault(p, []).append(j)
    queues = [list(v) for _, v in sorted(by_period.items())]
    chosen: list[int] = []
    while len(chosen) < n:
        for q in queues:
            if q and len(chosen) < n:
                chosen.append(q.pop(0))
    return sorted(chosen)


class SessionScorer:
    """Every (chosen) session of a ``ConstructionConfig``'s episodes, scorable by key ``"<conversation>/<session>"``.

    ``users`` picks episodes by index (None: all); ``max_sessions_per_user`` keeps N sessions of
    each, the first N (``pick="first"``) or N spread over every period (``pick="every_period"``,
    ``pick_sessions``). ``reward_density``, ``lam`` and ``alpha`` are the config's.

    ``baselines(key)`` scores writing nothing and the expert once per session (cached): the
    reward a session gives for free, and the most it gives.
    """

    def __init__(self, config: ConstructionConfig, users: Sequence[int] | None = None,
                 max_sessions_per_user: int | None = None, pick: str = "first"):
        if config.snapshot != "expert":
            raise ValueError("the trainer's scorer replays sessions out of order, so it needs snapshot 'expert' "
                             "(the memory before a session is the expert's); on_policy is for env.step")
        self.config = config
        self.reward_density = config.reward_density
        episodes = load_episodes(config)
        self.cache, self.models = load_scoring_models(config)
        self._sessions: dict[str, tuple[Episode, int, MemoryBank]] = {}
        self._baselines: dict[str, dict[str, CandidateReward]] = {}
        for u in range(len(episodes)) if users is None else users:
            if not 0 <= u < len(episodes):
                raise ValueError(f"user index {u} out of range: the world has {len(episodes)} users "
                                 f"(env config world_overrides={config.world_overrides}, world_path={config.world_path})")
            ep = episodes[u]
            periods = [int(s.meta.get("period", 0) or 0) for s in ep.conversation.sessions]
            keep = pick_sessions(periods, max_sessions_per_user, pick)
            snapshots = expert_snapshots(ep, self.cache, max(keep) + 1 if keep else 0)
            for j in keep:
                self._sessions[f"{ep.conversation.id}/{ep.conversation.sessions[j].id}"] = (ep, j, snapshots[j])

    def session_keys(self) -> list[str]:
        return list(self._sessions)

    def __contains__(self, session_key: object) -> bool:
        return session_key in self._sessions

    def observation(self, session_key: str) -> dict[str, Any]:
        ep, j, bank = self._lookup(session_key)
        s = ep.conversation.sessions[j]
        return build_observation(bank, s.render(), s.time, self.config.view_k, self.config.write_live)

    def expert_action(self, session_key: str) -> dict[str, str]:
        ep, j, _ = self._lookup(session_key)
        return dict(ep.expert_outputs[j])

    def score(self, session_key: str, candidates: Sequence[Mapping[str, str]], *,
              task_rewarded: bool = True) -> list[CandidateReward]:
        ep, j, bank = self._lookup(session_key)
        s, c = ep.conversation.sessions[j], self.config
        scored = score_session(bank, s, ep.conversation.qa_for_session(s.id), candidates, mode=c.answer_mode,
                               models=self.models, expert_output=ep.expert_outputs[j], task_rewarded=task_rewarded,
                               alpha=c.alpha, lam=c.lam, answer_k=c.answer_k, live_view=c.live_view,
                               attribution=c.attribution, quote_miss=c.quote_miss)
        return [x.reward for x in scored]

    def locate(self, session_key: str) -> tuple[Episode, int]:
        """The episode a session belongs to and its index there."""
        ep, j, _ = self._lookup(session_key)
        return ep, j

    def core_before(self, session_key: str) -> str:
        """The Core block of the snapshot the session is written into."""
        return self._lookup(session_key)[2].core.text

    def period(self, session_key: str) -> int:
        ep, j, _ = self._lookup(session_key)
        return int(ep.conversation.sessions[j].meta.get("period", 0) or 0)

    def baselines(self, session_key: str) -> dict[str, CandidateReward]:
        """``{"noop": ..., "oracle": ...}``: the rewards of writing nothing and of the expert's
        action on this session (task-rewarded), scored once and kept."""
        if session_key not in self._baselines:
            noop, oracle = self.score(session_key, [noop_action(self.core_before(session_key)),
                                                    self.expert_action(session_key)])
            self._baselines[session_key] = {"noop": noop, "oracle": oracle}
        return self._baselines[session_key]

    def _lookup(self, key: str):
        if key not in self._sessions:
            raise KeyError(f"no session {key!r} in this scorer")
        return self._sessions[key]
