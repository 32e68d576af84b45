"""``memgym evaluate --workers N``: the users of a world split over N processes.

Users are independent episodes, so a run parallelises over them without changing any result:
worker ``i`` plays users ``i, i + N, ...`` for every assistant, each with its own copy of the
model and ``threads`` torch threads, writing into the same run folders (one ``users/<user>``
folder each, so no two workers touch one file). The parent claims the folders first, shows one
progress bar from the workers' period events, and collects results when all have finished.
An interrupted parallel run resumes like a serial one, with any number of workers.

Why processes and not a bigger batch: a small model decoding one reply at a time uses a CPU
core poorly, and one process per core with one thread each keeps both busy (measured in
``bench/interactive_acceptance.py``).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memgym_env.interactive.run_files import finished_periods
from memgym_env.interactive.runner import (
    RunConfig,
    finish_run,
    load_constructor,
    load_run_models,
    play_users,
    prepare_run,
    run_users,
)
from memgym_env.world import read_world


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass


def _period_event(events, worker: int, assistant: str, models: list) -> Callable[[str, int], None]:
    """Each finished period goes to the parent, with this worker's model calls so far (all its models)."""
    def send(user: str, period: int) -> None:
        calls = 0
        for model in models:
            ledger = getattr(model, "ledger", None)
            calls += int(ledger.total.to_dict().get("calls", 0)) if ledger is not None else 0
        events.put(("period", worker, {"assistant": assistant, "user": user, "period": period,
                                       "worker": worker, "calls": calls}))
    return send


def _worker(worker: int, cfgs: list[dict[str, Any]], user_ids: list[str], threads: int | None, events) -> None:
    if threads:
        os.environ["MEMGYM_TORCH_THREADS"] = str(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # N workers' weight-loading bars would garble the parent's display

        runs = [RunConfig(**c) for c in cfgs]
        world = read_world(runs[0].world)
        model, embedder, checker = load_run_models(runs, threads)
        upper_cache: dict = {}  # shared by this worker's assistants, as in a serial run
        constructors: dict = {}  # membuilder's memory-writing models by spec, loaded once
        models = [model]
        for cfg in runs:
            users = [u for u in run_users(cfg, world) if u.id in user_ids]
            constructor = load_constructor(cfg, model, threads, constructors)
            models += [m for m in constructors.values() if m not in models]
            play_users(cfg, world, users, model, embedder, upper_cache, _NoBar(),
                       _period_event(events, worker, cfg.assistant, models), checker=checker,
                       constructor=constructor)
        events.put(("done", worker, None))
    except BaseException:  # noqa: BLE001 - the parent reports it; the periods already saved stay
        events.put(("error", worker, traceback.format_exc()))


def evaluate_parallel(cfgs: list[RunConfig], workers: int, threads: int | None = None,
                      on_period: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Play every assistant of ``cfgs`` (one world, one model) with users split over ``workers``
    processes; returns each run's results, in order. ``threads``: torch threads per worker
    (default: the machine's cores shared out). ``on_period`` gets each finished period
    (assistant, user, period, worker, the worker's model calls) instead of the progress bar."""
    from tqdm.auto import tqdm

    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if len({(c.world, c.model, c.embedder, c.checker, c.users) for c in cfgs}) != 1:
        raise ValueError("a parallel evaluation needs one world, model, embedder, checker and --users for all assistants")
    world = read_world(cfgs[0].world)
    metas = [prepare_run(c) for c in cfgs]
    users = run_users(cfgs[0], world)
    todo = [u.id for u in users if any(finished_periods(Path(c.out), u) < len(u.periods) for c in cfgs)]
    shards = [s for s in (todo[i::workers] for i in range(workers)) if s]
    threads = threads or max(1, (os.cpu_count() or 1) // max(len(shards), 1))
    started = time.perf_counter()
    total = sum(len(u.periods) for u in users) * len(cfgs)
    initial = sum(finished_periods(Path(c.out), u) for c in cfgs for u in users)
    ctx = multiprocessing.get_context("spawn")  # fork would copy a process that may hold torch threads
    events = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(i, [asdict(c) for c in cfgs], shard, threads, events), daemon=True)
             for i, shard in enumerate(shards)]
    errors: dict[int, str] = {}
    finished: set[int] = set()
    with tqdm(total=total, initial=initial, desc=f"{len(cfgs)} assistant(s) x {len(shards)} worker(s)",
              unit="period", disable=on_period is not None) as bar:
        for p in procs:
            p.start()
        try:
            while len(finished) + len(errors) < len(procs):
                try:
                    kind, worker, payload = events.get(timeout=2.0)
                except queue.Empty:
                    for i, p in enumerate(procs):  # a worker killed outright (out of memory) sends nothing
                        if not p.is_alive() and i not in finished and i not in errors:
                            errors[i] = f"worker {i} exited with code {p.exitcode} without reporting"
                    continue
                if kind == "period":
                    bar.update(1)
                    bar.set_postfix_str(f"{payload['assistant']} {payload['user'][:8]} period {payload['period']}")
                    if on_period is not None:
                        on_period(payload)
                elif kind == "done":
                    finished.add(worker)
                else:
                    errors[worker] = payload
        finally:
            for p in procs:
                if p.is_alive() and errors:
                    p.terminate()
                p.join()
    if errors:
        detail = "\n".join(f"--- worker {i} (users {', '.join(shards[i])}) ---\n{tb}" for i, tb in sorted(errors.items()))
        raise RuntimeError(f"{len(errors)} of {len(procs)} evaluation workers failed; finished periods are saved "
                           f"and the same command resumes:\n{detail}")
    wall = time.perf_counter() - started
    out = []
    for cfg, meta in zip(cfgs, metas, strict=True):
        meta = meta | {"workers": len(shards), "threads_per_worker": threads, "parallel_wall_s": round(wall, 1)}
        out.append(finish_run(cfg, world, meta, None))  # per assistant: its periods' seconds, summed
    return out
