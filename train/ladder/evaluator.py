"""The training ladder's held-out evaluation of a stage: MemoryGym-v0's session reward on the held-out users'
sessions (greedy, on ``eval_engine``) and the interactive memory score of the MemBuilder assistant writing
memory with the stage's policy; each cached in the ladder's work folder per engine.

The held-out sessions are ``eval_sessions_per_user`` of each held-out user, picked by ``eval_session_pick``
(by default spread over every period). Each evaluation also carries the held-out set's no-op and oracle
rewards (writing nothing, and the expert's writing: ``SessionScorer.baselines``), so a stage reads as its gain
over no-op against the oracle's gain, the ceiling."""

from __future__ import annotations

import gc
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from membuilder.llm import load_chat_model
from membuilder.llm.embedders import load_embedder
from membuilder.llm.registry import resolve_chat_path
from membuilder.llm.vllm_backend import cpu_engine_dtype
from membuilder.memory.grounding import GROUNDING_RULE
from membuilder.memory.ops import AGENTS, OPS_SCHEMA
from membuilder.plumbing.json_files import atomic_write_text, write_json
from membuilder.plumbing.stats import bootstrap_ci
from membuilder.training.checkpoints import save_merged
from membuilder.training.policy_eval import (
    baseline_summary,
    evaluate_policy,
    grounding_of,
    quoted_summary,
    score_outputs,
)
from memgym_env.benchmarks.grounding import MEASURES as GROUNDING_MEASURES
from memgym_env.benchmarks.grounding import ground_writer, with_unsaid
from memgym_env.benchmarks.locomo import read_locomo
from memgym_env.construction.answers import MODEL_FREE_MODES
from memgym_env.construction.audit import needs_changed_value
from memgym_env.construction.scoring import SessionScorer, pick_sessions
from memgym_env.interactive.run_files import question_outcomes
from memgym_env.interactive.runner import RunConfig, evaluate_one, load_run_models
from memgym_env.world.config import load_config
from memgym_env.world.data_json import read_world, write_world
from memgym_env.world.offline import generate_world
from train.common import chosen_episodes, load_policy, parse_users, session_periods
from train.ladder import machine
from train.ladder.settings import ENGINE_CONTEXT, LadderArgs


class Evaluator:
    """Held-out sessions scored by MemoryGym-v0 (built once), plus the interactive memory score."""

    def __init__(self, a: LadderArgs, work: Path):
        users = parse_users(a.held_out_users)
        if set(users) & set(parse_users(a.train_users)):
            raise SystemExit(f"held_out_users {a.held_out_users!r} overlap train_users {a.train_users!r}")
        # The model-free reward of the ladder's world (evidence, or stale on a tracks_change world), kept under the
        # name "evidence" that every row and cache has used; a world scored by a model is read in evidence mode.
        world = a.construction_config()
        world_mode = world.answer_mode
        self.reward_mode = world_mode if world_mode in MODEL_FREE_MODES else "evidence"
        self.scorers = {"evidence": SessionScorer(a.construction_config(answer_mode=self.reward_mode), users,
                                                  a.eval_sessions_per_user, pick=a.eval_session_pick)}
        if a.choice_answerer:
            self.scorers["choice"] = SessionScorer(a.construction_config(answer_mode="choice",
                                                                         answerer=a.choice_answerer),
                                                   users, a.eval_sessions_per_user, pick=a.eval_session_pick)
        self.keys = self.scorers["evidence"].session_keys()
        self.users = sorted({k.split("/")[0] for k in self.keys})
        self.a, self.work = a, work
        self.write_live = world.write_live  # the writers' view RL trains in, read once
        self._world = None

    def curve_keys(self) -> list[str]:
        """The held-out sessions each curve point scores (``curve_sessions`` of them, by ``curve_pick``): evenly
        spaced through the list, which runs user by user, so a curve of 12 points on 96 sessions sees every user
        and period rather than one user's sessions."""
        n = min(self.a.curve_sessions, len(self.keys))
        if self.a.curve_pick == "first" or n == 0:
            return self.keys[:n]
        return [self.keys[i * len(self.keys) // n] for i in range(n)]

    def generate(self, model, tokenizer, keys, label: str, scorers=None) -> dict[str, Any]:
        bar = tqdm(total=4 * len(keys), desc=f"evaluate {label}", unit="output", leave=False)
        res = evaluate_policy(model, tokenizer, scorers or self.scorers, keys,
                              max_new_tokens=self.a.max_completion_tokens, max_prompt_tokens=self.a.max_prompt_tokens,
                              batch_size=self.a.eval_batch_size, progress=bar.update)
        bar.close()
        return res

    def chat_model(self, policy: str):
        """The stage's policy as a ``ChatModel`` on ``eval_engine`` (a trained stage: its merged checkpoint)."""
        path = merged_path(policy)
        if self.a.eval_engine == "vllm":
            return load_chat_model(f"vllm:{path}", max_model_len=ENGINE_CONTEXT)  # the context RL's engine has
        return load_chat_model(f"transformers:{path}")

    def __call__(self, policy: str, label: str) -> dict[str, Any]:
        # Evaluation trains nothing: the base may run in bfloat16 where the CPU has it.
        t0 = time.perf_counter()
        if self.a.eval_engine == "vllm":
            from transformers import AutoTokenizer

            model = self.chat_model(policy)  # the tokenizer measures prompts exactly as RL's trainer does
            tokenizer = AutoTokenizer.from_pretrained(resolve_chat_path(merged_path(policy)))
            res = self.generate(model, tokenizer, self.keys, label)
            model.close()
        else:
            model, tokenizer, _ = load_policy(policy, "auto", frozen_base=True)
            res = self.generate(model, tokenizer, self.keys, label)
        del model
        gc.collect()
        res["engine"] = self.a.eval_engine
        res["engine_dtype"] = self.engine_dtype()
        res["session_pick"] = self.a.eval_session_pick
        res["reward_mode"] = self.reward_mode
        res["reward_ci"] = {name: bootstrap_ci(v) for name, v in res["session_rewards"].items()}
        res["eval_seconds"] = round(time.perf_counter() - t0, 1)
        return res

    def cached(self, policy: str | None, label: str, name: str, grounding: bool = True) -> dict[str, Any]:
        """Held-out generation and the memory score of one stage, each cached on its own with the weights it was
        made of (``policy_weights``), so a stage trained again with other weights is judged again; ``grounding``
        False writes no conv-26 memory but still shows a valid cached one. ``policy`` None: a stage trained on
        another machine, whose weights are not here, read from its caches alone."""
        here = policy is not None
        made_of = policy_weights(policy) if here else None

        def made(what: str, make):
            if here:  # where it ran: the interactive and conv-26 figures move with the machine (train.ladder.machine)
                return lambda: {**make(), "policy_weights": made_of, "evaluated_on": machine.evaluating()}

            def missing():
                raise FileNotFoundError(
                    f"{label}: {self.cache(name + what)} is missing or was made under other settings, and the stage's "
                    "adapter is not on this machine to judge it again; remove the stage's folder to train it here")
            return missing

        def fits(r: dict[str, Any]) -> bool:
            return made_of is None or same_policy(r, made_of)

        res = self.held_out(label, name, made("", lambda: self(policy, label)), fits)
        # The memory score and the conv-26 writes chain sessions (what one parse keeps, the next prompt shows), so
        # made under another parse rule they are made again, not scored again.
        memory = cached_json(self.cache(f"{name}-memory"), made("-memory", lambda: self.memory_score(policy, label)),
                             valid=lambda m: m.get("memory_settings") == self.memory_settings() and self.same_dtype(m)
                             and (not self.scores_memory() or "memory_accuracy" in m) and self.same_schema(m)
                             and fits(m))
        if "memory_correct" not in memory and (filled := self.with_outcomes(memory, label)) is not memory:
            memory = filled
            write_json(self.cache(f"{name}-memory"), memory)
        def valid(g: dict[str, Any]) -> bool:
            return (g.get("settings") == self.grounding_settings() and self.same_dtype(g) and self.same_schema(g)
                    and fits(g))

        # grounding off leaves its cache alone, so a sweep that skips it keeps the copied SFT figures intact
        path = self.cache(f"{name}-grounding")
        if not self.a.grounding_sessions:
            grounding = self.real_grounding(policy, label) if here else {}
        elif grounding and here:
            grounding = cached_json(path, made("-grounding", lambda: self.real_grounding(policy, label)), valid=valid)
        else:
            kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
            grounding = kept if valid(kept) else {}
        if grounding.get("writes") and (filled := self.with_unsaid(grounding)) is not grounding:
            grounding = filled
            write_json(path, grounding)
        return {**res, **memory, "real_grounding": grounding if grounding.get("all") else None,
                "evaluated_on": {"held_out": res.get("evaluated_on"), "interactive": memory.get("evaluated_on"),
                                 "conv26": grounding.get("evaluated_on")}}

    def with_unsaid(self, grounding: dict[str, Any]) -> dict[str, Any]:
        """conv-26 writes cached before each entry recorded its capitalised words never said, with them filled in
        from the same windows (the base model's tokenizer cut them; LoRA keeps it), writing nothing again."""
        if all("unsaid" in w for w in grounding["writes"]):
            return grounding
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(resolve_chat_path(self.a.model_name_or_path))
        sessions = read_locomo(Path(grounding["settings"]["data"]))[0].sessions[:grounding["sessions"]]
        return with_unsaid(grounding, sessions, lambda text: len(tokenizer.encode(text, add_special_tokens=False)))

    def held_out(self, label: str, name: str, make, fits) -> dict[str, Any]:
        """The stage's held-out evaluation, cached (``make`` generates it, ``fits`` checks a cached one's weights);
        one cached under an older parse rule is scored again from its outputs and kept so."""
        res = self.with_baselines(cached_json(self.cache(name), make,
                                              valid=lambda r: self.same_sessions(r) and self.same_dtype(r) and fits(r)))
        if not self.same_schema(res):
            res = self.rescored(res)
            write_json(self.cache(name), res)
        if res.get("grounding_rule", 1) != GROUNDING_RULE:  # read again off the outputs: nothing is generated
            first = next(iter(self.scorers.values()))
            res = {**res, "grounding": grounding_of(res["outputs"], {k: first.observation(k) for k in res["session_keys"]}),
                   "grounding_rule": GROUNDING_RULE}
            write_json(self.cache(name), res)
        return res

    def same_sessions(self, res: dict[str, Any]) -> bool:
        """Whether a cached evaluation scored this ladder's held-out sessions with its reward: the same sessions
        (one copied from a ladder with fewer held-out sessions is made again), made with its pick (one cached before
        evaluations recorded their pick took the first sessions) and answer mode (before they recorded it,
        evidence)."""
        return (res.get("session_pick", "first") == self.a.eval_session_pick
                and res.get("reward_mode", "evidence") == self.reward_mode
                and res.get("session_keys", self.keys) == self.keys)

    @staticmethod
    def same_schema(res: dict[str, Any]) -> bool:
        """Whether a cached result was made under today's parse rule (``OPS_SCHEMA``; one without the key: rule 1)."""
        return res.get("ops_schema", 1) == OPS_SCHEMA

    def rescored(self, res: dict[str, Any]) -> dict[str, Any]:
        """A cached held-out evaluation scored again from its outputs under today's parse rule, generating nothing:
        each session's four outputs are one rollout, so validity, rewards and quotes follow from the text alone.
        Which outputs ran to the token limit is not kept per output; their shares stand."""
        keys = res["session_keys"]
        slots = [(k, a) for k in keys for a in AGENTS]
        new = score_outputs(self.scorers, keys, slots, [res["outputs"][k][a] for k, a in slots], [False] * len(slots))
        kept = {k: res[k] for k in ("cut_rate", "engine", "engine_dtype", "session_pick", "reward_mode", "eval_seconds")
                if k in res}
        return {**new, **kept, "reward_ci": {n: bootstrap_ci(v) for n, v in new["session_rewards"].items()},
                "rescored_from_schema": res.get("ops_schema", 1)}

    def engine_dtype(self) -> str | None:
        """The dtype the evaluation engine runs in where it is known before loading: vLLM on a CPU
        (``cpu_engine_dtype``); None elsewhere."""
        if self.a.eval_engine != "vllm":
            return None
        import torch

        return None if torch.cuda.is_available() else cpu_engine_dtype()

    def same_dtype(self, res: dict[str, Any]) -> bool:
        """Whether a cached evaluation ran in this engine's dtype: greedy outputs move with it, so every stage
        of a ladder is judged in one. One cached before evaluations recorded it ran in vLLM's bfloat16."""
        return res.get("engine_dtype", "bfloat16" if self.a.eval_engine == "vllm" else None) == self.engine_dtype()

    def changed_sessions(self) -> dict[str, bool]:
        """Per held-out session, whether a variable one of its questions needs changed in it (where a writer
        must edit memory, not only add to it)."""
        scorer = self.scorers["evidence"]
        return {k: needs_changed_value(scorer, k) for k in self.keys}

    def expert_outputs(self) -> dict[str, dict[str, str]]:
        """Per held-out session, the expert's output of each agent (what the world's oracle writes there)."""
        scorer = self.scorers["evidence"]
        return {k: scorer.expert_action(k) for k in self.keys}

    def quote_misses(self, outputs: dict[str, dict[str, str]]) -> dict[str, dict[str, int]]:
        """Per held-out session and agent, the quotes of a stage's outputs that named no memory there, read off by
        the model-free reward re-applying them (nothing is generated)."""
        scorer = self.scorers["evidence"]
        return {k: {a: missing for a, (_, missing) in scorer.score(k, [o])[0].info["quoted"].items()}
                for k, o in outputs.items() if k in scorer}

    def with_baselines(self, res: dict[str, Any]) -> dict[str, Any]:
        """A cached evaluation with the keys ``evaluate_policy`` returns today: one made before the no-op and oracle
        keys gets them here (they depend on the sessions alone), one made before ``quoted`` gets it from its outputs
        (the model-free reward re-applies them), without generating again."""
        if "noop_reward" in res and "quoted" in res:
            return res
        res = dict(res)
        if "noop_reward" not in res:
            for name, rewards in res["session_rewards"].items():
                if name in self.scorers:
                    for key, value in baseline_summary(self.scorers[name], res["session_keys"], rewards).items():
                        res.setdefault(key, {})[name] = value
        if "quoted" not in res:  # what the edits quoted: read off the cached outputs by the model-free reward
            scorer = self.scorers["evidence"]
            res["quoted"] = quoted_summary([scorer.score(k, [res["outputs"][k]])[0] for k in res["session_keys"]])
        return res

    def memory_settings(self) -> dict[str, int]:
        """How the memory score's MemBuilder assistant writes: the stage's output limit, as in RL and the held-out
        evaluation, and prompts that leave room for it in the engine's context."""
        out = {"write_tokens": self.a.max_completion_tokens,
               "write_prompt_tokens": ENGINE_CONTEXT - self.a.max_completion_tokens}
        if self.write_live:  # the default stays out of the caches' settings, so those made before it still fit
            out["write_view"] = "live"
        return out

    def cache(self, name: str) -> Path:
        """A stage evaluation's cache file: one per engine, so a work folder can change engines."""
        return self.work / "eval" / f"{name}.{self.a.eval_engine}.json"

    def world(self) -> Path:
        """The interactive memory score's world, generated once into the work folder."""
        path = self.work / "memory_score_world.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_world(generate_world(load_config("configs/env/base.yaml", dict(self.a.memory_score_world))), path)
        return path

    def interactive_dir(self, label: str) -> Path:
        """A stage's interactive run folder (its questions and answers, period by period)."""
        view = ".live" if self.write_live else ""
        return self.work / "interactive" / f"{label}.{self.a.eval_engine}.w{self.a.max_completion_tokens}{view}"

    def with_outcomes(self, memory: dict[str, Any], label: str) -> dict[str, Any]:
        """A memory score with each question's outcome (``memory_correct``), so stages pair question by question;
        one cached before it kept them gets them from its run folder, answering nothing again."""
        if "memory_correct" in memory or memory.get("memory_accuracy") is None:
            return memory
        run = self.interactive_dir(label)
        return {**memory, "memory_correct": question_outcomes(run) if run.is_dir() else None}

    def scores_memory(self) -> bool:
        return bool(self.a.memory_score_world) and self.a.interactive_eval

    def memory_score(self, policy: str, label: str) -> dict[str, Any]:
        """MemoryGym-Interactive-v0's MemBuilder assistant writing memory with ``policy``."""
        if not self.scores_memory():
            return {"memory_score": None, "memory_score_ci": None, "memory_settings": self.memory_settings(),
                    "engine_dtype": self.engine_dtype(), "ops_schema": OPS_SCHEMA}
        t0 = time.perf_counter()
        world_path = self.world()
        trained = Path(policy).exists()
        # The ladder reports accuracy and the score, not the failure diagnosis, so the probes (about a sixth of a
        # stage's memory score) are left out; they change no question's answer, so older cached scores stand.
        # The stage's policy writes the memory; the untrained model answers, as in `memgym evaluate`. Both run
        # on eval_engine, named outright: a short model name would pick vLLM wherever it is installed.
        engine = self.a.eval_engine
        settings = self.memory_settings()
        cfg = RunConfig(world=str(world_path), assistant="membuilder", out=str(self.interactive_dir(label)),
                        model=f"{engine}:{self.a.model_name_or_path}",
                        policy_model=merged_path(policy) if trained else policy, factual_recall=False,
                        probes=False, **settings)
        model, embedder, _ = load_run_models([cfg])
        constructor = self.chat_model(policy) if trained else model
        results = evaluate_one(cfg, read_world(world_path), model, embedder, {}, constructor=constructor)
        cells = [v for row in results["per_user"]["memory_score"] for v in row]
        for m in {id(model): model, id(constructor): constructor}.values():
            if hasattr(m, "close"):
                m.close()
        del model, embedder, constructor
        gc.collect()
        score = results["overall"]["memory_score"]
        score = None if score is None or math.isnan(score) else score  # undefined where no cell is (JSON has no NaN)
        overall = results["overall"]
        # Accuracy rests on every question, the memory score only on cells with headroom (metrics.MIN_HEADROOM):
        # on a small world the accuracy, its interval and the upper bound are the figures to trust.
        return {"memory_score": score, "memory_score_ci": bootstrap_ci(cells), "engine_dtype": self.engine_dtype(),
                "ops_schema": OPS_SCHEMA,
                "memory_score_cells": sum(v is not None for v in cells), "memory_settings": settings,
                "memory_correct": question_outcomes(Path(cfg.out)),
                "memory_score_cells_low_headroom": overall.get("memory_score_cells_low_headroom"),
                "memory_accuracy": overall.get("accuracy"), "memory_accuracy_ci": overall.get("accuracy_ci95"),
                "memory_upper_bound": overall.get("upper_bound"), "memory_random": overall.get("random"),
                "memory_questions": overall.get("questions"),
                "memory_score_seconds": round(time.perf_counter() - t0, 1)}


    def grounding_settings(self) -> dict[str, Any]:
        """What conv-26's writes and their grounding depend on; a cache made under other settings is made again."""
        return {"data": self.a.grounding_data, "sessions": self.a.grounding_sessions,
                "window_tokens": self.a.write_window_tokens, "grounding_rule": GROUNDING_RULE,
                "measures": list(GROUNDING_MEASURES),
                **self.memory_settings()}

    def real_grounding(self, policy: str, label: str) -> dict[str, Any]:
        """The stage's policy writing memory over the first ``grounding_sessions`` sessions of a real conversation
        (LoCoMo conv-26), and how much of what it wrote is grounded there (``memgym_env.benchmarks.grounding``),
        with the prompt budget and output limit of the memory score."""
        settings = self.grounding_settings()
        path = Path(self.a.grounding_data)
        if not self.a.grounding_sessions or not path.exists():
            return {"settings": settings, "all": None, "engine_dtype": self.engine_dtype(), "ops_schema": OPS_SCHEMA,
                    "skipped": "grounding_sessions is 0" if path.exists() else f"{path} not found"}
        t0 = time.perf_counter()
        sessions = read_locomo(path)[0].sessions[:self.a.grounding_sessions]
        model = self.chat_model(policy) if Path(policy).exists() else load_chat_model(
            f"{self.a.eval_engine}:{policy}", **({"max_model_len": ENGINE_CONTEXT} if self.a.eval_engine == "vllm" else {}))
        bar = tqdm(total=len(sessions), desc=f"conv-26 {label}", unit="session", leave=False)
        try:
            out = ground_writer(model, sessions, load_embedder("minilm"), max_new_tokens=settings["write_tokens"],
                                view_k=self.a.construction_config().view_k,
                                max_prompt_tokens=settings["write_prompt_tokens"],
                                window_tokens=settings["window_tokens"], progress=bar.update,
                                live_only=self.write_live)
        finally:
            bar.close()
            if hasattr(model, "close"):
                model.close()
            del model
            gc.collect()
        return {**out, "settings": settings, "engine_dtype": self.engine_dtype(), "ops_schema": OPS_SCHEMA,
                "seconds": round(time.perf_counter() - t0, 1)}


def oracle_over_limit(a: LadderArgs) -> dict[str, Any]:
    """How many of the oracle's outputs (its text and the end-of-turn token) exceed ``max_completion_tokens``,
    per agent, over the training users' sessions and the held-out sessions: an output the expert needs more
    room for is one the policy is cut at, in RL and in the evaluation alike."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_chat_path(a.model_name_or_path))
    config = a.construction_config()
    out: dict[str, Any] = {"limit": a.max_completion_tokens}
    rl_sessions = a.stage_config(a.rl_stages[0] if a.rl_stages else "adrpo")["max_sessions_per_user"]
    rl_pick = a.stage_config(a.rl_stages[0] if a.rl_stages else "adrpo").get("session_pick", "first")
    for name, users, limit, pick in (("train", a.train_users, rl_sessions, rl_pick),
                                     ("held_out", a.held_out_users, a.eval_sessions_per_user, a.eval_session_pick)):
        over: dict[str, int] = {}
        longest: dict[str, int] = {}
        sessions = 0
        for ep in chosen_episodes(config, parse_users(users)):
            outputs = [ep.expert_outputs[j] for j in pick_sessions(session_periods(ep), limit or None, pick)]
            sessions += len(outputs)
            for session in outputs:
                for agent, text in session.items():
                    n = len(tokenizer(text)["input_ids"]) + 1
                    over[agent] = over.get(agent, 0) + (n > a.max_completion_tokens)
                    longest[agent] = max(longest.get(agent, 0), n)
        out[name] = {"sessions": sessions, "over_limit": over, "longest": longest}
    return out


def policy_weights(policy: str) -> str:
    """What an evaluation was made of: ``sha256:`` of an adapter's weight file, or a base model's name. A stage
    trained again (its adapter lost with a machine, say) is judged again unless its weights came out the same."""
    weights = Path(policy) / "adapter_model.safetensors"
    if not weights.exists():
        return f"model:{policy}"
    digest = hashlib.sha256()
    with weights.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def same_policy(res: dict[str, Any], made_of: str) -> bool:
    """Whether a cached evaluation was made of these weights; one cached before evaluations recorded them is
    taken as it is (nothing says otherwise)."""
    return res.get("policy_weights", made_of) == made_of


def merged_path(policy: str) -> str:
    """The merged checkpoint beside an adapter folder (what the interactive env loads by path), merged again from
    the adapter where it is missing: a work folder carried between machines keeps only the adapters."""
    p = Path(policy)
    if not (p / "adapter_config.json").exists():
        return policy
    if not (p.parent / "merged" / "config.json").exists():
        model, tokenizer, _ = load_policy(policy, "auto", frozen_base=True)
        save_merged(model, tokenizer, p.parent)
        del model
        gc.collect()
    return str(p.parent / "merged")


def cached_json(path: Path, make, valid=None):
    """``make()``, kept in ``path``; a cached value ``valid`` rejects (made under other settings) is made again."""
    if path.exists():
        value = json.loads(path.read_text(encoding="utf-8"))
        if valid is None or valid(value):
            return value
    value = make()
    atomic_write_text(path, json.dumps(value, indent=1))
    return value
