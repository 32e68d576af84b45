"""How well a policy writes memory on sessions it never trained on: JSON validity and reward.

The policy plays the four agents of each session greedily, from the prompts RL uses
(``prompts.fit_prompt``), and each session's four outputs are scored as one rollout by every
scorer given (e.g. MemoryGym-v0 in ``evidence`` and in ``choice`` answer mode). The scorer is
passed in, so this module never imports the environment.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from membuilder.agents.constructor import OBS_CORE, shown_texts
from membuilder.llm.base import Sampling
from membuilder.llm.greedy_decode import greedy_decode
from membuilder.memory.grounding import GROUNDING_RULE, Grounding, grounded_share, written_units
from membuilder.memory.ops import AGENTS, OPS_SCHEMA, parse
from membuilder.reward import CandidateScorer
from membuilder.training.prompts import fit_prompt, token_counter


def greedy_batches(prompts: Sequence[list[dict[str, str]]], batch_size: int) -> list[list[int]]:
    """The prompt indices ``generate_greedy`` puts in each batch: longest prompts first, so a batch pads
    little. A caller splitting the work over processes hands each one whole batches from here, so every
    output is made in the same company of prompts (and so the same padding) as in one serial call."""
    order = sorted(range(len(prompts)), key=lambda i: -len(str(prompts[i])))
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def generate_greedy(model, tokenizer, prompts: Sequence[list[dict[str, str]]], max_new_tokens: int = 256,
                    batch_size: int = 8, progress: Callable[[int], None] | None = None,
                    cut: list[bool] | None = None, prefill=None) -> list[str]:
    """Greedy completions of chat prompts, batched with left padding (deterministic for a seed-free run);
    a row leaves its batch once it ends, and ``prefill`` (a twin of ``model`` in another dtype) reads
    the prompts where given (``greedy_decode``).

    ``cut``, when given, receives per prompt whether its output ran to ``max_new_tokens`` without
    ending its turn (the repetition loops a weak policy falls into)."""
    model.eval()
    # generate's own end tokens: the generation config's, else the tokenizer's
    ends = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ends = {int(t) for t in (ends if isinstance(ends, (list, tuple)) else [ends]) if t is not None}
    ends = ends or {tokenizer.eos_token_id}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    by_index: dict[int, str] = {}
    ended: dict[int, bool] = {}
    for idx in greedy_batches(prompts, batch_size):
        texts = [tokenizer.apply_chat_template(prompts[i], add_generation_prompt=True, tokenize=False) for i in idx]
        rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        for i, new in zip(idx, greedy_decode(model, rows, max_new_tokens, eos_ids=ends, pad_id=pad,
                                                        prefill=prefill), strict=True):
            by_index[i] = tokenizer.decode(new, skip_special_tokens=True)
            ended[i] = bool(new) and new[-1] in ends
        if progress:
            progress(len(idx))
    if cut is not None:
        cut[:] = [not ended[i] for i in range(len(prompts))]
    return [by_index[i] for i in range(len(prompts))]


def generate_greedy_chat(chat, prompts: Sequence[list[dict[str, str]]], max_new_tokens: int = 256,
                         progress: Callable[[int], None] | None = None, cut: list[bool] | None = None) -> list[str]:
    """``generate_greedy`` through a ``ChatModel`` of any backend, in one call: vLLM's engine
    schedules all prompts itself (continuous batching), the transformers backend in its own batches.

    ``cut`` receives per prompt whether its output stopped at ``max_new_tokens``."""
    replies = chat.generate(list(prompts), Sampling(temperature=0.0, max_new_tokens=max_new_tokens))
    if progress:
        progress(len(replies))
    if cut is not None:
        cut[:] = [r.finish_reason == "length" for r in replies]
    return [r.text for r in replies]


def _is_chat_model(model) -> bool:
    """A ``ChatModel`` (generates from conversations) rather than a transformers causal LM."""
    return callable(getattr(model, "count_tokens", None))


def evaluate_policy(model, tokenizer, scorers: Mapping[str, CandidateScorer], session_keys: Sequence[str] | None = None,
                    *, max_new_tokens: int = 256, max_prompt_tokens: int | None = None, batch_size: int = 8,
                    progress: Callable[[int], None] | None = None, prefill=None) -> dict[str, Any]:
    """Validity per agent and mean session reward per scorer, on ``session_keys`` (default: all).

    ``model`` is a transformers causal LM (generated here, ``batch_size`` prompts at a time) or a
    ``ChatModel`` of any backend (e.g. vLLM's engine); ``tokenizer`` measures the prompts either way.
    Every scorer must know the same sessions; the first one renders the observations.
    Returns ``{"valid_rate": {agent: share}, "cut_rate": {agent: share of outputs cut at the token
    limit}, "reward": {name: mean r}, "task_reward": {name: mean}, "session_rewards": {name: [r per
    session]}, "session_keys": [...], "sessions": n, "outputs": {key: {agent: text}}}``; ``reward`` is the mean over agents of
    r_a = 1[valid_a] * r_task * (1 - lambda * l_a), the quantity ADRPO maximises.

    A scorer with ``baselines(key)`` (writing nothing and the expert on each session) also gives, per
    scorer name, ``noop_reward``, ``oracle_reward``, ``gain`` (the policy's reward minus the no-op's,
    mean over sessions: what the policy's writing added), ``oracle_gain`` (the most writing adds here)
    and per session ``session_noop`` and ``session_oracle``; with ``period(key)`` too, ``per_period``:
    ``{name: {period (a string, as JSON keeps it): {"sessions", "reward", "noop", "oracle"}}}``
    (``noop`` and ``oracle`` None without baselines).
    """
    if not scorers:
        raise ValueError("evaluate_policy needs at least one scorer")
    first = next(iter(scorers.values()))
    keys = list(session_keys if session_keys is not None else first.session_keys())
    prompts, slots = policy_prompts(first, keys, tokenizer, max_prompt_tokens)
    cut: list[bool] = []
    texts = generate_outputs(model, tokenizer, prompts, max_new_tokens, batch_size, progress, cut=cut, prefill=prefill)
    return score_outputs(scorers, keys, slots, texts, cut)


def generate_outputs(model, tokenizer, prompts: Sequence[list[dict[str, str]]], max_new_tokens: int,
                     batch_size: int = 8, progress: Callable[[int], None] | None = None,
                     cut: list[bool] | None = None, prefill=None) -> list[str]:
    """Greedy outputs of a transformers causal LM (``generate_greedy``, ``prefill`` reading its prompts
    where given) or of any ``ChatModel``."""
    if _is_chat_model(model):
        return generate_greedy_chat(model, prompts, max_new_tokens, progress, cut=cut)
    return generate_greedy(model, tokenizer, prompts, max_new_tokens, batch_size, progress, cut=cut, prefill=prefill)


def policy_prompts(scorer: CandidateScorer, keys: Sequence[str], tokenizer,
                   max_prompt_tokens: int | None = None) -> tuple[list[list[dict[str, str]]], list[tuple[str, str]]]:
    """The four agents' prompts of every session in ``keys`` as RL renders them (``fit_prompt`` within
    ``max_prompt_tokens``), and the (session, agent) slot of each."""
    count = token_counter(tokenizer)
    prompts, slots = [], []
    for key in keys:
        obs = scorer.observation(key)
        for agent in AGENTS:
            prompts.append(fit_prompt(agent, obs, count, max_prompt_tokens))
            slots.append((key, agent))
    return prompts, slots


def score_outputs(scorers: Mapping[str, CandidateScorer], keys: Sequence[str], slots: Sequence[tuple[str, str]],
                  texts: Sequence[str], cut: Sequence[bool]) -> dict[str, Any]:
    """``evaluate_policy``'s result for outputs made elsewhere: ``texts[i]`` (and whether it was ``cut`` at the
    token limit) is the output for ``slots[i]`` of ``policy_prompts``."""
    first = next(iter(scorers.values()))
    outputs: dict[str, dict[str, str]] = defaultdict(dict)
    was_cut: dict[str, dict[str, bool]] = defaultdict(dict)
    for (key, agent), text, c in zip(slots, texts, cut, strict=True):
        outputs[key][agent] = text
        was_cut[key][agent] = c
    n = max(1, len(keys))
    valid = {a: sum(parse(a, outputs[k][a]).valid for k in keys) / n for a in AGENTS}
    cut_rate = {a: sum(was_cut[k][a] for k in keys) / n for a in AGENTS}
    reward, task, per_session = {}, {}, {}
    learnable: dict[str, dict[str, Any]] = defaultdict(dict)  # the no-op / oracle keys, where a scorer has baselines
    first_scored = None
    for name, scorer in scorers.items():
        scored = [scorer.score(k, [outputs[k]])[0] for k in keys]
        first_scored = first_scored or scored
        per_session[name] = [float(r.reward) for r in scored]
        reward[name] = sum(per_session[name]) / n
        task[name] = sum(r.task_reward for r in scored) / n
        for key, value in baseline_summary(scorer, keys, per_session[name]).items():
            learnable[key][name] = value
    return {"valid_rate": valid, "cut_rate": cut_rate, "reward": reward, "task_reward": task,
            "quoted": quoted_summary(first_scored),
            "session_rewards": per_session, "session_keys": keys, "sessions": len(keys), "outputs": dict(outputs),
            "grounding": grounding_of(outputs, {k: first.observation(k) for k in keys}),
            "grounding_rule": GROUNDING_RULE, "ops_schema": OPS_SCHEMA, **learnable}


def quoted_summary(scored: Sequence[Any] | None) -> dict[str, dict[str, int]] | None:
    """Per agent, over the scored sessions: how much existing memory the edits quoted (UPDATE and MERGE entries,
    Core REPLACE text) and how much of it was not there. A missed quote is an UPDATE written as a new entry
    beside the stale one, or a REPLACE that changed nothing: the edit a change needed did not happen. None
    where the scorer does not report quotes."""
    if not scored or any("quoted" not in (r.info or {}) for r in scored):
        return None
    out = {a: {"quoted": 0, "missing": 0} for a in AGENTS}
    for r in scored:
        for agent, (quoted, missing) in r.info["quoted"].items():
            out[agent]["quoted"] += quoted
            out[agent]["missing"] += missing
    return out


def grounding_of(outputs: Mapping[str, Mapping[str, str]], observations: Mapping[str, Mapping[str, Any]]) -> dict:
    """Per agent and over all: how many written entries are grounded in the session or in the memory
    the writer was shown (``membuilder.memory.grounding``)."""
    per_agent = {a: Grounding() for a in AGENTS}
    total = Grounding()
    for key, outs in outputs.items():
        obs = observations[key]
        sources = shown_texts(obs)
        for agent in AGENTS:
            parsed = parse(agent, outs.get(agent, ""))
            if not parsed.valid:
                continue
            for unit in written_units(parsed.ops, obs.get(OBS_CORE, "")):
                share = grounded_share(unit, sources)
                per_agent[agent].add(share)
                total.add(share)
    return {"all": total.to_dict(), **{a: g.to_dict() for a, g in per_agent.items()}}


def baseline_summary(scorer: CandidateScorer, keys: Sequence[str], rewards: Sequence[float]) -> dict[str, Any]:
    """What writing could add on ``keys``, given the policy's reward on each: the scorer's no-op and oracle
    rewards, the gains, and the per-period breakdown (each where the scorer offers ``baselines`` / ``period``)."""
    baselines, period = getattr(scorer, "baselines", None), getattr(scorer, "period", None)
    n = max(1, len(keys))
    out: dict[str, Any] = {}
    noop = oracle = None
    if callable(baselines):
        both = [baselines(k) for k in keys]
        noop = [float(b["noop"].reward) for b in both]
        oracle = [float(b["oracle"].reward) for b in both]
        out = {"noop_reward": sum(noop) / n, "oracle_reward": sum(oracle) / n,
               "gain": sum(r - z for r, z in zip(rewards, noop, strict=True)) / n,
               "oracle_gain": sum(o - z for o, z in zip(oracle, noop, strict=True)) / n,
               "session_noop": noop, "session_oracle": oracle}
    if callable(period):
        rows: dict[int, list[int]] = defaultdict(list)
        for i, k in enumerate(keys):
            rows[int(period(k))].append(i)

        def mean(values, idx):
            return None if values is None else sum(values[i] for i in idx) / len(idx)

        out["per_period"] = {str(p): {"sessions": len(idx), "reward": mean(rewards, idx), "noop": mean(noop, idx),
                                      "oracle": mean(oracle, idx)} for p, idx in sorted(rows.items())}
    return out
