"""Start ``memgym serve-env`` replicas as child processes and learn their URLs (tests, benchmarks,
single-machine scale-out); on a cluster, start them however the cluster starts services."""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import threading
import time
from typing import Any

_READY = re.compile(r"memgym serve-env: .* at (http://\S+) ")


def start_replicas(n: int, env_overrides: dict[str, Any] | None = None, *, env_config: str | None = None,
                   extra_args: tuple[str, ...] = (), threads: int = 1, timeout_s: float = 300.0,
                   nice: int = 0, cores: list[int] | None = None) -> list[tuple[subprocess.Popen, str]]:
    """``n`` replicas on free loopback ports, started together; ``(process, url)`` each.
    ``cores``: replica i runs on core ``cores[i % len(cores)]`` alone (Linux), so replicas do not share one.
    A replica that exits or stays silent past ``timeout_s`` stops them all and raises with its output."""
    command = [sys.executable, "-m", "memgym_env.cli", "serve-env", "--port", "0", "--threads", str(threads),
               "--env-overrides", json.dumps(env_overrides or {}), *extra_args]
    if env_config:
        command += ["--env-config", env_config]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(threads)}
    prefix = ["nice", "-n", str(nice)] if nice else []
    if cores is not None and (not cores or not hasattr(os, "sched_setaffinity")):
        raise ValueError(f"cores={cores!r}: pinning needs a non-empty list of cores and Linux's sched_setaffinity")
    procs = [subprocess.Popen(prefix + command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True,
                              preexec_fn=_pin(cores[i % len(cores)]) if cores else None)
             for i in range(n)]
    urls: dict[int, str] = {}
    seen: dict[int, list[str]] = {i: [] for i in range(n)}
    selector = selectors.DefaultSelector()
    for i, p in enumerate(procs):
        selector.register(p.stderr, selectors.EVENT_READ, i)
    deadline = time.monotonic() + timeout_s
    try:
        while len(urls) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"memgym serve-env replicas not ready after {timeout_s:.0f} s: "
                                   + " | ".join("".join(seen[i][-5:]) for i in range(n) if i not in urls))
            for key, _ in selector.select(timeout=1.0):
                i = key.data
                line = procs[i].stderr.readline()
                if not line:
                    selector.unregister(key.fileobj)
                    procs[i].wait(timeout=10)
                    raise RuntimeError(f"memgym serve-env replica exited ({procs[i].returncode}): "
                                       + "".join(seen[i][-20:]))
                seen[i].append(line)
                match = _READY.search(line)
                if match:
                    urls[i] = match.group(1)
                    selector.unregister(key.fileobj)
                    # Keep reading, so later warnings cannot fill the pipe and stall the replica.
                    threading.Thread(target=_drain, args=(procs[i].stderr,), daemon=True).start()
    except BaseException:
        stop_replicas(procs)
        raise
    finally:
        selector.close()
    return [(procs[i], urls[i]) for i in range(n)]


def _pin(core: int):
    """Runs in the child before it starts: every thread it makes (torch's included) inherits the core."""
    return lambda: os.sched_setaffinity(0, {core})


def _drain(stream) -> None:
    for _ in stream:
        pass


def stop_replicas(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
