"""The main job of ``memgym demo``, stage by stage: world, MemoryGym-v0 rollouts, interactive evaluation.

Each stage is a plain function that returns JSON-ready results; ``memgym_env.demo.report`` turns
them into ``report.json``, ``report.md`` and the plots. ``Progress`` is the live display.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from membuilder.agents.constructor import MemBuilderPolicy
from membuilder.llm.base import Sampling
from membuilder.llm.registry import TRAINED_POLICY
from membuilder.memory.ops import AGENTS
from memgym_env.construction.env import ConstructionConfig, MemoryGymEnv
from memgym_env.interactive.runner import RunConfig, evaluate_one, load_constructor
from memgym_env.interactive.workers import evaluate_parallel
from memgym_env.world import generate_world, load_config, read_world, write_world

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
    reply_tokens: int = 16
    write_tokens: int = 32
    top_k: int = 5


# Measured on 2 CPU cores (see README): QUICK about 90 s, DEFAULT about 6 minutes (2 workers); goals 2 and 10.
# DEFAULT's MemoryGym-v0 MemBuilder rows write one session at 160 tokens per agent (the trained
# policy's completion length in training; shorter outputs cut every JSON answer), about 25 s each.
QUICK = DemoSizes(users=1, periods=2, questions=1, rollout_sessions=3, policy_sessions=1, policy_tokens=16,
                  eval_users=1, on_policy=False, write_tokens=16, top_k=3)
DEFAULT = DemoSizes(users=3, periods=4, questions=2, rollout_sessions=6, policy_sessions=1, policy_tokens=160,
                    eval_users=2, on_policy=True, write_tokens=24)
FULL = DemoSizes(users=3, periods=4, questions=4, rollout_sessions=16, policy_sessions=16, policy_tokens=256,
                 eval_users=3, on_policy=True, changes_per_period=4, reply_tokens=48, write_tokens=128, top_k=10,
                 compare_interactive=True)
PRESETS = {"quick": QUICK, "default": DEFAULT, "full": FULL}


class Progress:
    """A live line: stage, user and period, model calls so far, elapsed time (rich)."""

    def __init__(self, models: list[Any]):
        from rich.console import Console
        from rich.live import Live

        self.models, self.stage, self.where, self.started = models, "", "", time.perf_counter()
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

    def set(self, stage: str | None = None, where: str = "") -> None:
        if stage is not None:
            self.stage = stage
        self.where = where
        self.live.update(self._render())

    def __enter__(self) -> Progress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.update(self._render())
        self.live.__exit__(*exc)


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
    writes the membuilder policy's memory; ``untrained`` (a model) adds the ``membuilder-untrained`` row."""
    env = MemoryGymEnv(ConstructionConfig(world_path=str(world), answer_mode="evidence", questions_per_session=3))
    sampling = Sampling(temperature=0.0, max_new_tokens=sizes.policy_tokens)
    writers = {"membuilder": MemBuilderPolicy(model, sampling)}
    if untrained is not None:
        writers[UNTRAINED] = MemBuilderPolicy(untrained, sampling)
    out: dict[str, Any] = {}
    for name in POLICIES + ((UNTRAINED,) if untrained is not None else ()):
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
    ``constructors``: already loaded constructor models by spec, for a serial run."""
    runs = {name: (name, policy_model) for name in assistants}
    if untrained is not None:
        runs[UNTRAINED] = ("membuilder", untrained)
    names = tuple(runs)
    cfgs = [RunConfig(world=str(world), assistant=assistant, out=str(out / "runs" / name), model=model_spec,
                      policy_model=policy, users=sizes.eval_users, replay=None if sizes.on_policy else "world",
                      reply_tokens=sizes.reply_tokens, write_tokens=sizes.write_tokens, top_k=sizes.top_k,
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
