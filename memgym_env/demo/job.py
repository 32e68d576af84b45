"""The main job of ``memgym demo``, stage by stage: world, MemoryGym-v0 rollouts, interactive evaluation.

Each stage is a plain function that returns JSON-ready results; ``memgym_env.demo.report`` turns
them into ``report.json``, ``report.md`` and the plots. ``Progress`` is the live display.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from membuilder.agents.constructor import MemBuilderPolicy
from membuilder.llm import load_chat_model
from membuilder.llm.base import Sampling
from membuilder.llm.registry import (
    TRAINED_POLICY,
    constructor_spec,
    parse_spec,
    policy_setting,
    resolve_chat_path,
)
from membuilder.memory.ops import AGENTS
from membuilder.plumbing.stats import bootstrap_ci, paired_difference
from membuilder.training.policy_eval import (
    evaluate_policy,
    generate_outputs,
    greedy_batches,
    policy_prompts,
    score_outputs,
)
from memgym_env.construction.env import ConstructionConfig, MemoryGymEnv
from memgym_env.construction.scoring import SessionScorer
from memgym_env.interactive.runner import RunConfig, evaluate_one, load_constructor
from memgym_env.interactive.workers import evaluate_parallel
from memgym_env.world import generate_world, load_config, read_world, write_world
from memgym_env.world.user_ranges import parse_users

POLICIES = ("oracle", "empty", "membuilder")
ASSISTANTS = ("rag", "awe", "membuilder", "oracle")
UNTRAINED = "membuilder-untrained"  # the extra MemBuilder row whose constructor is the untrained base
EMPTY_ACTION = {"core": "", "episodic": '{"operations": []}', "semantic": '{"operations": []}',
                "procedural": '{"operations": []}'}


@dataclass
class DemoSizes:
    """How big the demo is; ``QUICK``, ``DEFAULT`` and ``FULL`` are the three presets."""

    users: int = field(metadata={"help": "users in the generated world"})
    periods: int = field(metadata={"help": "periods per user (period 0 plus updates)"})
    questions: int = field(metadata={"help": "questions per user in the world"})
    rollout_sessions: int = field(metadata={"help": "MemoryGym-v0 sessions per policy (first user)"})
    policy_sessions: int = field(metadata={"help": "of those, sessions written by the SmolLM2 MemBuilder policy (trained and untrained each)"})
    policy_tokens: int = field(metadata={"help": "longest output of one MemBuilder agent in MemoryGym-v0"})
    eval_users: int = field(metadata={"help": "users played through the interactive evaluation"})
    on_policy: bool = field(metadata={"help": "assistants converse with the simulated user (else: replay the world's sessions)"})
    changes_per_period: int = 1  # state changes per update period: fewer changes, fewer sessions
    compare_interactive: bool = False  # play the untrained MemBuilder constructor interactively too (else MemoryGym-v0 only)
    assistants: tuple[str, ...] = ASSISTANTS  # played interactively (oracle gives the upper bound)
    # The constructor comparison: sessions of the trained policy's held-out users, in its card's setting.
    held_out_users: int = field(default=4, metadata={"help": "held-out users of the policy card whose sessions the constructors write"})
    held_out_sessions: int = 6  # per user, spread over the periods
    held_out_tokens: int | None = field(default=None, metadata={
        "help": "cap on the card's output tokens, in the comparison and in MemBuilder's interactive writes "
                "(QUICK only: a smoke run, not a measure)"})
    reply_tokens: int = 16
    write_tokens: int = 32
    top_k: int = 5


# Goals on 2 CPU cores: QUICK 2 minutes, DEFAULT 10 (see README for the measured times and load).
# The constructor comparison is the demo's heaviest stage and keeps the trained policy's own setting
# (24 held-out sessions at 256-token outputs; the untrained model's outputs run to the limit, so its
# batches are queued first for the workers). The interactive part plays MemBuilder with both
# constructors at that output limit too (at 24 tokens every JSON write was cut: empty memory), so
# DEFAULT's interactive part is small: 2 users x 2 periods, RAG as the baseline (FULL adds AWE).
QUICK = DemoSizes(users=1, periods=2, questions=1, rollout_sessions=3, policy_sessions=1, policy_tokens=16,
                  eval_users=1, on_policy=False, write_tokens=16, top_k=3, held_out_users=1, held_out_sessions=2,
                  held_out_tokens=32)
DEFAULT = DemoSizes(users=2, periods=2, questions=2, rollout_sessions=6, policy_sessions=1, policy_tokens=160,
                    eval_users=2, on_policy=True, write_tokens=24, compare_interactive=True,
                    assistants=("rag", "membuilder", "oracle"))
FULL = DemoSizes(users=3, periods=4, questions=4, rollout_sessions=16, policy_sessions=16, policy_tokens=256,
                 eval_users=3, on_policy=True, changes_per_period=4, reply_tokens=48, write_tokens=128, top_k=10,
                 compare_interactive=True, held_out_users=8)
PRESETS = {"quick": QUICK, "default": DEFAULT, "full": FULL}


class Progress:
    """A live line: stage, user and period, model calls so far, elapsed time (rich)."""

    def __init__(self, models: list[Any]):
        from rich.console import Console
        from rich.live import Live

        self.models, self.stage, self.where, self.started = models, "", "", time.perf_counter()
        # Wall and CPU seconds per part of the demo (the stage label before " · "); CPU counts this process
        # and the worker processes it has joined, so on a loaded machine it still says where the work went.
        self.clock: dict[str, dict[str, float]] = {}
        self._part, self._mark = "", (self.started, _cpu_seconds())
        self.worker_calls: dict[int, int] = {}  # model calls reported by evaluation worker processes
        self.console = Console()
        self.live = Live(self._render(), console=self.console, refresh_per_second=2, transient=False)

    def calls(self) -> int:
        total = 0
        for m in self.models:
            ledger = getattr(m, "ledger", None) or getattr(getattr(m, "model", None), "ledger", None)
            total += int(ledger.total.to_dict().get("calls", 0)) if ledger is not None else 0
        return total + sum(self.worker_calls.values())

    def _render(self):
        from rich.text import Text

        return Text.assemble(("demo ", "bold"), (f"{self.stage}", "cyan"), f"  {self.where}  ",
                             (f"model calls {self.calls()}", "magenta"),
                             f"  {time.perf_counter() - self.started:.0f}s")

    def _close_part(self) -> None:
        wall, cpu = time.perf_counter(), _cpu_seconds()
        if self._part:
            spent = self.clock.setdefault(self._part, {"wall_s": 0.0, "cpu_s": 0.0})
            spent["wall_s"] += wall - self._mark[0]
            spent["cpu_s"] += cpu - self._mark[1]
        self._mark = (wall, cpu)

    def set(self, stage: str | None = None, where: str = "") -> None:
        if stage is not None:
            self.stage = stage
            part = stage.split(" · ")[0]
            if part != self._part:
                self._close_part()
                self._part = part
        self.where = where
        self.live.update(self._render())

    def __enter__(self) -> Progress:
        self.live.__enter__()
        return self

    def stage_seconds(self) -> dict[str, dict[str, float]]:
        """Wall and CPU seconds of each part so far, in the order the parts ran."""
        self._close_part()
        return {part: {k: round(v, 1) for k, v in spent.items()} for part, spent in self.clock.items()}

    def __exit__(self, *exc) -> None:
        self.live.update(self._render())
        self.live.__exit__(*exc)


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def make_world(sizes: DemoSizes, out: Path, seed: int) -> Path:
    """A seeded offline world of ``sizes.users`` users and ``sizes.periods`` periods, written to ``out``."""
    cfg = load_config(None, {"num_users": sizes.users, "num_periods": sizes.periods - 1,
                             "num_questions": sizes.questions, "seed": seed,
                             "changes_per_period": sizes.changes_per_period, "changes_jitter": 0})
    path = out / "world.json"
    write_world(generate_world(cfg), path)
    return path


def rollouts(world: Path, sizes: DemoSizes, model, progress: Progress, untrained=None) -> dict[str, Any]:
    """MemoryGym-v0 on the first user with each policy; per-agent rewards per session. ``model``
    writes the membuilder policy's memory (None: no membuilder row, where ``compare_constructors``
    measures the constructors in their own setting); ``untrained`` (a model) adds the
    ``membuilder-untrained`` row."""
    env = MemoryGymEnv(ConstructionConfig(world_path=str(world), answer_mode="evidence", questions_per_session=3))
    sampling = Sampling(temperature=0.0, max_new_tokens=sizes.policy_tokens)
    writers = {"membuilder": MemBuilderPolicy(model, sampling)} if model is not None else {}
    if untrained is not None:
        writers[UNTRAINED] = MemBuilderPolicy(untrained, sampling)
    out: dict[str, Any] = {}
    names = [p for p in POLICIES if p != "membuilder" or model is not None] + ([UNTRAINED] if untrained is not None else [])
    for name in names:
        obs, info = env.reset(seed=0, options={"episode": 0})
        total = min(sizes.policy_sessions if name in writers else sizes.rollout_sessions, info["num_sessions"])
        steps = []
        for i in range(total):
            progress.set(f"MemoryGym-v0 · {name} policy", f"session {i + 1}/{total}")
            action = env.unwrapped.expert_action() if name == "oracle" else \
                EMPTY_ACTION if name == "empty" else writers[name].act(obs)
            obs, reward, done, _, info = env.step(action)
            steps.append({"session": info["session_index"], "reward": reward, "task_reward": info["task_reward"],
                          "agent_rewards": info["agent_rewards"], "valid": info["valid"]})
            if done:
                break
        n = max(len(steps), 1)
        out[name] = {"sessions": len(steps), "mean_reward": sum(s["reward"] for s in steps) / n,
                     "per_agent": {a: sum(s["agent_rewards"][a] for s in steps) / n for a in AGENTS},
                     "valid": {a: sum(float(s["valid"][a]) for s in steps) / n for a in AGENTS},
                     "steps": steps}
    return out


def interactive(world: Path, sizes: DemoSizes, model, embedder, model_spec: str, out: Path,
                progress: Progress, assistants: tuple[str, ...] = ASSISTANTS, workers: int = 1,
                policy_model: str = TRAINED_POLICY, untrained: str | None = None,
                constructors: dict[str, Any] | None = None) -> dict[str, Any]:
    """The interactive evaluation of each assistant (oracle is the upper bound); results per assistant.
    With ``workers`` > 1 the users are split over that many processes of one torch thread each.
    membuilder writes memory with ``policy_model`` where ``model_spec`` is SmolLM2; ``untrained``
    (a spec) adds a ``membuilder-untrained`` run constructing with it, answering with the same model.
    Both MemBuilder runs write at the output limit on the trained policy's card (as the comparison
    does), other assistants at ``sizes.write_tokens``.
    ``constructors``: already loaded constructor models by spec, for a serial run."""
    runs = {name: (name, policy_model) for name in assistants}
    card = policy_setting(constructor_spec(model_spec, policy_model))
    policy_tokens = int(card["max_completion_tokens"]) if card else sizes.write_tokens
    if sizes.held_out_tokens is not None:
        policy_tokens = min(policy_tokens, sizes.held_out_tokens)
    if untrained is not None:
        runs[UNTRAINED] = ("membuilder", untrained)
    names = tuple(runs)
    cfgs = [RunConfig(world=str(world), assistant=assistant, out=str(out / "runs" / name), model=model_spec,
                      policy_model=policy, users=sizes.eval_users, replay=None if sizes.on_policy else "world",
                      reply_tokens=sizes.reply_tokens, top_k=sizes.top_k,
                      write_tokens=policy_tokens if assistant == "membuilder" else sizes.write_tokens,
                      factual_recall=False) for name, (assistant, policy) in runs.items()]
    workers = min(workers, sizes.eval_users)
    if workers > 1:
        progress.set(f"interactive · {', '.join(names)}", f"starting {workers} workers")

        def worker_period(ev: dict[str, Any]) -> None:
            progress.worker_calls[ev["worker"]] = ev["calls"]
            progress.set(f"interactive · {ev['assistant']}",
                         f"user {ev['user'][:8]} period {ev['period'] + 1}/{sizes.periods} done (worker {ev['worker']})")

        results = evaluate_parallel(cfgs, workers, threads=1, on_period=worker_period)
        return dict(zip(names, results, strict=True))
    w = read_world(world)
    cache: dict = {}
    constructors = dict(constructors or {})
    results = {}
    for name, cfg in zip(names, cfgs, strict=True):
        progress.set(f"interactive · {name}", "starting")

        def period_done(user: str, period: int) -> None:
            progress.set(None, f"user {user[:8]} period {period + 1}/{sizes.periods} done")

        results[name] = evaluate_one(cfg, w, model, embedder, cache, on_period_end=period_done,
                                     constructor=load_constructor(cfg, model, cache=constructors))
    return results


def sizes_dict(sizes: DemoSizes) -> dict[str, Any]:
    return asdict(sizes)


# --- The constructor comparison, in the setting the shipped policy was trained in -----------------

REPO = Path(__file__).resolve().parents[2]  # configs/ paths in a policy card are relative to the repository


def _repo_path(path: str | None) -> str | None:
    """A relative configs/ path as given where it exists from here, else under the repository."""
    if path is None or Path(path).is_absolute() or Path(path).exists():
        return path
    return str(REPO / path) if (REPO / path).exists() else path


def setting_config(setting: dict[str, Any]) -> ConstructionConfig:
    """The card's MemoryGym-v0 config, readable from any working directory."""
    cfg = ConstructionConfig.from_yaml(_repo_path(setting["env_config"]), **dict(setting.get("env_overrides") or {}))
    return replace(cfg, world_config=_repo_path(cfg.world_config))


def held_out_scorer(setting: dict[str, Any], users: int, sessions: int) -> SessionScorer:
    """``sessions`` sessions of each of the first ``users`` held-out users, spread over the periods
    (a user's first sessions start from an empty memory: they alone would only test writing from nothing)."""
    held_out = parse_users(setting["held_out_users"], what="the policy card's held_out_users")
    if len(held_out) < users:
        raise ValueError(f"the policy card holds out {len(held_out)} users ({setting['held_out_users']}); "
                         f"the demo asks for {users}")
    return SessionScorer(setting_config(setting), users=held_out[:users], max_sessions_per_user=sessions,
                         pick="every_period")


def _generator(chat, spec: str):
    """What ``evaluate_policy`` generates with, and its tokenizer: a transformers ``ChatModel``'s own
    model (batched there, with progress per batch), any other ``ChatModel`` as it is."""
    if getattr(chat, "model", None) is not None and getattr(chat, "tokenizer", None) is not None:
        return chat.model, chat.tokenizer
    from transformers import AutoTokenizer

    return chat, AutoTokenizer.from_pretrained(resolve_chat_path(parse_spec(spec).model))


def _summary(rewards: dict[str, float]) -> dict[str, Any]:
    values = list(rewards.values())
    return {"mean_reward": sum(values) / max(len(values), 1), "ci": bootstrap_ci(values), "n": len(values)}


def verdict(difference: dict[str, Any] | None) -> str:
    """One plain sentence on whether training shows, from the paired difference's interval."""
    if not difference or not difference.get("ci"):
        return "trained > untrained: not shown: no session was scored"
    lo, hi = difference["ci"]
    if lo > 0:
        return "trained > untrained: yes (interval above zero)"
    where = "below zero" if hi < 0 else "zero inside the interval"
    return (f"trained > untrained: not shown: trained - untrained {difference['mean']:+.3f}, 95% CI "
            f"[{lo:.3f}, {hi:.3f}] over {difference['n']} sessions ({where})")


BATCH = 16  # prompts generated together: the batch size of the trained policy's held-out evaluation


def evaluate_constructor(spec: str, chat, scorer: SessionScorer, setting: dict[str, Any],
                         progress=None) -> dict[str, Any]:
    """One constructor greedily writing every session of ``scorer`` at the setting's token limits
    (``evaluate_policy`` in 16-prompt batches): its per-session rewards, validity, grounding, outputs,
    and the no-op's and oracle's rewards on the same sessions."""
    keys = scorer.session_keys()
    model, tokenizer = _generator(chat, spec)
    res = evaluate_policy(model, tokenizer, {"reward": scorer}, keys, max_new_tokens=int(setting["max_completion_tokens"]),
                          max_prompt_tokens=setting.get("max_prompt_tokens"), batch_size=BATCH, progress=progress,
                          prefill=getattr(chat, "prefill_model", None))
    return constructor_result(spec, keys, res)


def constructor_result(spec: str, keys: list[str], res: dict[str, Any]) -> dict[str, Any]:
    """``evaluate_constructor``'s summary of one ``evaluate_policy`` result."""
    rewards = dict(zip(keys, res["session_rewards"]["reward"], strict=True))
    return {"spec": spec, **_summary(rewards), "valid_rate": res["valid_rate"], "cut_rate": res["cut_rate"],
            "grounding": res["grounding"]["all"], "session_rewards": rewards, "outputs": res["outputs"],
            **{name: dict(zip(keys, res[f"session_{name}"]["reward"], strict=True)) for name in ("noop", "oracle")}}


def _generation_worker(threads: int, tasks, events) -> None:
    """A spawned process generating whole batches for whichever constructor a task names, loading each
    constructor once; it takes ``(task, spec, prompts, max_new_tokens)`` until None and reports
    ``(kind, task, payload)`` on ``events``."""
    os.environ["MEMGYM_TORCH_THREADS"] = str(threads)
    loaded: dict[str, tuple[Any, Any]] = {}
    while (task := tasks.get()) is not None:
        tid, spec, prompts, max_new_tokens = task
        try:
            if spec not in loaded:
                chat = load_chat_model(spec, threads=threads)
                loaded[spec] = (*_generator(chat, spec), getattr(chat, "prefill_model", None))
            model, tokenizer, prefill = loaded[spec]
            cut: list[bool] = []
            texts = generate_outputs(model, tokenizer, prompts, max_new_tokens, batch_size=len(prompts), cut=cut,
                                     prefill=prefill)
            events.put(("done", tid, (texts, cut)))
        except BaseException as exc:  # the parent raises it: a worker's traceback would be lost in the live display
            events.put(("error", tid, f"{type(exc).__name__}: {exc}"))
            return


def _evaluate_in_workers(setting: dict[str, Any], sizes: DemoSizes, writers: dict[str, tuple[str, Any]],
                         progress: Progress, workers: int) -> dict[str, dict[str, Any]]:
    """The constructors' generation split into whole batches (``greedy_batches``, as one serial call makes
    them) shared by ``workers`` spawned processes of one torch thread, so both cores stay busy to the end:
    the untrained model runs every output to the token limit and alone would hold one core long after the
    trained one is done. The first writer's batches are queued first (the caller lists the slow one first).
    Scoring happens here, once every output is in."""
    scorer = held_out_scorer(setting, sizes.held_out_users, sizes.held_out_sessions)
    keys = scorer.session_keys()
    max_new_tokens = int(setting["max_completion_tokens"])
    prompts: dict[str, tuple[list, list]] = {}
    batches: list[tuple[str, list[int]]] = []
    for label, (spec, chat) in writers.items():
        prompts[label] = policy_prompts(scorer, keys, _generator(chat, spec)[1], setting.get("max_prompt_tokens"))
        batches += [(label, idx) for idx in greedy_batches(prompts[label][0], BATCH)]
    ctx = multiprocessing.get_context("spawn")  # fork would copy a process that may hold torch threads
    tasks, events = ctx.Queue(), ctx.Queue()
    for tid, (label, idx) in enumerate(batches):
        tasks.put((tid, writers[label][0], [prompts[label][0][i] for i in idx], max_new_tokens))
    procs = [ctx.Process(target=_generation_worker, args=(1, tasks, events), daemon=True) for _ in range(workers)]
    for p in procs:
        tasks.put(None)
        p.start()
    made: dict[int, tuple[list[str], list[bool]]] = {}
    done: dict[str, int] = dict.fromkeys(writers, 0)
    total = {label: len(prompts[label][0]) for label in writers}
    try:
        while len(made) < len(batches):
            try:
                kind, tid, payload = events.get(timeout=5)
            except queue.Empty:
                if not any(p.is_alive() for p in procs):
                    raise RuntimeError("every constructor evaluation process ended before its outputs were in") from None
                continue
            label = batches[tid][0]
            if kind == "error":
                raise RuntimeError(f"evaluating the {label} constructor: {payload}")
            made[tid] = payload
            done[label] += len(payload[0])
            progress.set("constructors · " + ", ".join(writers),
                         "  ".join(f"{k} {'done' if v == total[k] else f'{v}/{total[k]}'}" for k, v in done.items()))
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    built = {}
    for label, (spec, _) in writers.items():
        texts: list[str] = [""] * len(prompts[label][0])
        cut: list[bool] = [False] * len(texts)
        for tid, (owner, idx) in enumerate(batches):
            if owner == label:
                for i, text, was_cut in zip(idx, *made[tid], strict=True):
                    texts[i], cut[i] = text, was_cut
        built[label] = constructor_result(spec, keys, score_outputs({"reward": scorer}, keys, prompts[label][1], texts, cut))
    return built


def compare_constructors(setting: dict[str, Any], sizes: DemoSizes, writers: dict[str, tuple[str, Any]],
                         progress: Progress, workers: int = 1) -> dict[str, Any]:
    """The trained and the untrained constructor writing the same held-out sessions of the policy's
    own setting, greedily at its token limits; ``writers`` is ``{"untrained": (spec, chat model),
    "trained": (spec, chat model)}``. Per constructor: mean session reward with its 95% bootstrap
    interval and n, JSON validity per agent, grounding; the no-op and oracle rewards of the same
    sessions; trained - untrained paired by session, and the verdict. With ``workers`` > 1 the
    generation is shared by that many processes (each loading the models again), batch by batch
    (``_evaluate_in_workers``)."""
    total = 4 * sizes.held_out_users * sizes.held_out_sessions
    card_tokens = int(setting["max_completion_tokens"])
    if sizes.held_out_tokens is not None:
        setting = {**setting, "max_completion_tokens": min(card_tokens, sizes.held_out_tokens)}
    progress.set("constructors · held-out sessions", f"{sizes.held_out_users} users x {sizes.held_out_sessions} sessions")
    if workers > 1 and len(writers) > 1:
        built = _evaluate_in_workers(setting, sizes, writers, progress, workers)
    else:
        scorer = held_out_scorer(setting, sizes.held_out_users, sizes.held_out_sessions)
        built = {}
        for label, (spec, chat) in writers.items():
            done = [0]

            def step(n: int, label=label, done=done) -> None:
                done[0] += n
                progress.set(f"constructors · {label}", f"outputs {done[0]}/{total}")

            built[label] = evaluate_constructor(spec, chat, scorer, setting, step)
    keys = list(next(iter(built.values()))["session_rewards"])
    out: dict[str, Any] = {"setting": setting, "users": sorted({k.split("/")[0] for k in keys}), "session_keys": keys,
                           "max_new_tokens": int(setting["max_completion_tokens"]),
                           "card_max_completion_tokens": card_tokens,
                           "max_prompt_tokens": setting.get("max_prompt_tokens"), "constructors": {}}
    for label, c in built.items():
        out["constructors"][label] = {k: v for k, v in c.items() if k not in ("noop", "oracle")}
    # The no-op and the oracle depend on the sessions alone: any constructor's evaluation gives them.
    first = next(iter(built.values()))
    for name in ("noop", "oracle"):
        out[name] = _summary(first[name])
    if {"trained", "untrained"} <= built.keys():
        out["difference"] = paired_difference(built["untrained"]["session_rewards"], built["trained"]["session_rewards"])
        out["verdict"] = verdict(out["difference"])
    return out
