"""Remote scoring: sessions scored per second in-process, on one and on two `memgym serve-env` replicas.

    python bench/remote_scoring.py        # -> bench/results/remote_scoring.json, a few minutes on 2 cores

G = 8 candidate actions per session (the expert's writes and seven variations of them), evidence
answer mode (no model) and choice mode (SmolLM2-135M answers by log-probability). Each path scores
the same sessions once to warm its caches, then is timed on a second pass. One torch thread per
replica and in-process, and each replica pinned to a core of its own (``--pin``), so two replicas use
two cores; the load average at the start and the end says whether anything else ran. A goal whose
mode was not run (``--modes``) is null. The HTTP overhead of a call is its
wall time at the client minus the scoring time the replica reports.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from memgym_env.construction.config import ConstructionConfig  # noqa: E402
from memgym_env.construction.scoring import SessionScorer  # noqa: E402
from memgym_env.serving.remote_scorer import RemoteScorer, http_client  # noqa: E402
from memgym_env.serving.replicas import start_replicas, stop_replicas  # noqa: E402
from memgym_env.serving.wire import dumps, score_request  # noqa: E402

ENV_CONFIG = "configs/env/construction_cpu.yaml"
G = 8
BROKEN = "{not json"
MODES = ("evidence", "choice")
EMPTY = {"core": "", "episodic": '{"operations": []}', "semantic": '{"operations": []}', "procedural": '{"operations": []}'}


def candidates(expert: dict[str, str]) -> list[dict[str, str]]:
    return [expert, EMPTY, {**EMPTY, "core": expert["core"]}, {**expert, "core": BROKEN},
            {**expert, "episodic": EMPTY["episodic"]}, {**expert, "semantic": EMPTY["semantic"]},
            {**expert, "procedural": BROKEN}, {**EMPTY, "semantic": expert["semantic"]}]


def timed(fn, rounds: int = 2) -> float:
    """Seconds of the last of ``rounds`` runs (the first ones warm the caches)."""
    for _ in range(rounds - 1):
        fn()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def overhead(url: str, batch) -> tuple[float, float]:
    """Median client wall time and median replica scoring time of one call, in ms."""
    walls, server = [], []
    with http_client(url, 600) as client:
        for key, cands, _ in batch:
            body = dumps(score_request(key, cands))
            started = time.perf_counter()
            reply = client.post("/score", content=body, headers={"Content-Type": "application/json"})
            walls.append(time.perf_counter() - started)
            reply.raise_for_status()
            server.append(reply.json()["seconds"])
    return 1000 * statistics.median(walls), 1000 * statistics.median(server)


def measure(mode: str, users: int, sessions_per_user: int, cores: list[int] | None = None) -> dict:
    overrides = {"answer_mode": mode, "world_overrides": {"num_users": users, "num_periods": 1, "rounds_update": 1}}
    config = ConstructionConfig.from_yaml(ENV_CONFIG, **overrides)
    local = SessionScorer(config, None, sessions_per_user)
    batch = [(k, candidates(local.expert_action(k)), True) for k in local.session_keys()]
    n = len(batch)
    in_process = timed(lambda: [local.score(k, c, task_rewarded=r) for k, c, r in batch])
    replicas = start_replicas(2, overrides, env_config=ENV_CONFIG, threads=1, cores=cores,
                              extra_args=("--max-sessions-per-user", str(sessions_per_user), "--openenv", "off"))
    try:
        urls = [u for _, u in replicas]
        one, two = RemoteScorer(urls[:1], expected_config=config), RemoteScorer(urls, expected_config=config)
        one_s = timed(lambda: one.score_many(batch))  # the first pass warms the replica and the connection
        two_s = timed(lambda: two.score_many(batch))
        wall_ms, server_ms = overhead(urls[0], batch)
        one.close()
        two.close()
    finally:
        stop_replicas([p for p, _ in replicas])
    return {"sessions": n, "G": G,
            "in_process_sessions_per_s": round(n / in_process, 2),
            "one_replica_sessions_per_s": round(n / one_s, 2),
            "two_replicas_sessions_per_s": round(n / two_s, 2),
            "two_over_one": round(one_s / two_s, 2),
            "call_wall_ms_median": round(wall_ms, 1), "call_scoring_ms_median": round(server_ms, 1),
            "http_overhead_ms": round(wall_ms - server_ms, 1),
            "http_overhead_share": round((wall_ms - server_ms) / wall_ms, 3)}


def goals(results: dict[str, dict]) -> dict:
    """Each goal met (true) or missed (false); null where its mode was not run: false means measured and missed."""
    return {"http_overhead_share_choice_at_most_0.10":
            results["choice"]["http_overhead_share"] <= 0.10 if "choice" in results else None,
            "two_over_one_at_least_1.6": {m: results[m]["two_over_one"] >= 1.6 if m in results else None
                                          for m in MODES}}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench/results/remote_scoring.json")
    p.add_argument("--modes", default=",".join(MODES), help=f"answer modes to measure, comma-separated, of {MODES}")
    p.add_argument("--pin", choices=("on", "off"), default="on",
                   help="on: each replica on a core of its own (replica i on core i), so two replicas cannot share "
                        "one; off: wherever the OS puts them")
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        p.error(f"--modes {args.modes!r}: expected some of {MODES}")
    torch.set_num_threads(1)
    # A stopped benchmark (timeout, Ctrl-C) still stops its replicas: SIGTERM unwinds through `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    load_at_start = round(os.getloadavg()[0], 2)
    sizes = {"evidence": (2, 6), "choice": (2, 1)}  # (users, sessions per user)
    cores = sorted(os.sched_getaffinity(0)) if args.pin == "on" else None
    results = {m: measure(m, *sizes[m], cores=cores) for m in modes}
    out = {
        "what": "MemoryGym-v0 sessions scored per second with G=8 candidates: in-process SessionScorer, one and two "
                "memgym serve-env replicas on loopback (RemoteScorer.score_many), one torch thread each; warm caches",
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_at_start": load_at_start,
                    "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
                    "replica_cores": cores[:2] if cores else "not pinned",
                    "python": platform.python_version(), "torch": torch.__version__},
        "results": results,
        "goals": goals(results),
        "not_run": [m for m in MODES if m not in results],
        "seconds": round(time.perf_counter() - started, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
