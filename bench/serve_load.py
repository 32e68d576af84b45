"""``memgym serve`` under load: 100 concurrent small chat requests, alone and with a 1 MB prompt.

Starts ``memgym serve`` with the real SmolLM2-135M (no embedder) on loopback as a subprocess,
then runs two rounds over loopback HTTP, each client on a connection of its own:

- ``baseline``: 100 small chat requests at once (``max_tokens`` 4);
- ``with_big_prompt``: a 1 MB prompt is sent first and, while it is in flight, the same 100
  small requests.

Per round it records the status codes (a request that got no HTTP status at all, such as a
reset connection, counts under its exception's name), the small requests' p50/p95/max latency
and the wall time. Expected: every request answered, no resets; 200 for the small ones, 400 for
the 1 MB prompt (it does not fit the model's context); 429 only if the queue is full. The server
process's RSS (sampled every 20 ms, children included) is recorded idle, at its peak through the
baseline round, at its peak over the whole run and at the end.

    python bench/serve_load.py [--requests 100] [--max-tokens 4]   # -> bench/results/serve_load.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIG_PROMPT_BYTES = 1024 * 1024


def start_server(model: str, max_batch: int) -> tuple[subprocess.Popen, str, list[str]]:
    """``memgym serve`` on a free loopback port; returns the process, its /v1 URL and its log."""
    cmd = [sys.executable, "-m", "memgym_env.cli", "serve", "--model", model, "--no-embedder",
           "--host", "127.0.0.1", "--port", "0", "--max-batch", str(max_batch)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    log: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            log.append(line.rstrip())
            match = re.search(r" at (http://\S+/v1) ", line)
            if match and not url:
                url.append(match.group(1))
                found.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 300
    while not found.wait(0.2):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("memgym serve did not start:\n" + "\n".join(log[-20:]))
    import httpx

    while True:  # the banner comes just before uvicorn listens
        try:
            if httpx.get(url[0].rsplit("/v1", 1)[0] + "/health", timeout=5).status_code == 200:
                return proc, url[0], log
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("memgym serve did not answer /health:\n" + "\n".join(log[-20:]))
        time.sleep(0.1)


class PeakRSS:
    """The largest resident set of a process and its children, sampled in a thread."""

    def __init__(self, pid: int, every_s: float = 0.02):
        import psutil

        self.proc, self.every_s, self.peak, self._stop = psutil.Process(pid), every_s, 0, threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def now(self) -> int:
        import psutil

        total = 0
        for p in [self.proc] + self.proc.children(recursive=True):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.now())
            except Exception:  # the process ended
                return
            time.sleep(self.every_s)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


async def one_request(url: str, body: dict, timeout: float) -> tuple[str, float]:
    """(status, seconds); status is the HTTP code, or the exception's name when none came back."""
    import httpx

    started = time.perf_counter()
    try:  # a client (and so a connection) of its own, as separate users would have
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.post(f"{url}/chat/completions", json=body)
        status = str(response.status_code)
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    return status, time.perf_counter() - started


async def round_(url: str, requests: int, max_tokens: int, big: bool, timeout: float) -> dict:
    small = [{"messages": [{"role": "user", "content": f"Say one word about the number {i}."}],
              "max_tokens": max_tokens, "temperature": 0} for i in range(requests)]
    started = time.perf_counter()
    big_task = None
    if big:
        filler = ("the quick brown fox jumps over the lazy dog " * (BIG_PROMPT_BYTES // 44 + 1))[:BIG_PROMPT_BYTES]
        big_task = asyncio.create_task(one_request(
            url, {"messages": [{"role": "user", "content": filler}], "max_tokens": max_tokens}, timeout))
        await asyncio.sleep(0.05)  # the 1 MB body is on its way before the small requests start
    results = await asyncio.gather(*(one_request(url, body, timeout) for body in small))
    big_result = await big_task if big_task is not None else None
    wall = time.perf_counter() - started
    latencies = sorted(seconds for status, seconds in results if status == "200")

    def pct(q: float) -> float | None:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else None

    out = {"small_requests": requests, "small_status": dict(Counter(status for status, _ in results)),
           "small_p50_s": pct(0.50), "small_p95_s": pct(0.95),
           "small_max_s": round(latencies[-1], 3) if latencies else None, "wall_s": round(wall, 2)}
    if big_result is not None:
        out["big_prompt_bytes"] = BIG_PROMPT_BYTES
        out["big_status"], out["big_s"] = big_result[0], round(big_result[1], 3)
    return out


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=300.0, help="per request, seconds")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve_load.json"))
    args = parser.parse_args()

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    proc, url, log = start_server(args.model, args.max_batch)
    startup_s = time.perf_counter() - t0
    try:
        with PeakRSS(proc.pid) as rss:
            idle_rss = rss.now()
            warm = asyncio.run(round_(url, 1, args.max_tokens, big=False, timeout=args.timeout))  # first-call costs
            baseline = asyncio.run(round_(url, args.requests, args.max_tokens, big=False, timeout=args.timeout))
            print("baseline       ", json.dumps(baseline), flush=True)
            peak_baseline = rss.peak
            loaded = asyncio.run(round_(url, args.requests, args.max_tokens, big=True, timeout=args.timeout))
            print("with_big_prompt", json.dumps(loaded), flush=True)
            end_rss = rss.now()
        alive = proc.poll() is None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()

    no_status = sum(count for r in (baseline, loaded) for status, count in r["small_status"].items()
                    if not status.isdigit()) + (not loaded["big_status"].isdigit())
    result = {
        "model": args.model, "max_tokens": args.max_tokens, "max_batch": args.max_batch,
        "warmup": warm, "baseline": baseline, "with_big_prompt": loaded,
        "requests_without_status": no_status,
        "p95_with_big_over_baseline": (round(loaded["small_p95_s"] / baseline["small_p95_s"], 2)
                                       if loaded["small_p95_s"] and baseline["small_p95_s"] else None),
        "server_startup_s": round(startup_s, 1),
        "server_rss_mb": {"idle": round(idle_rss / 2**20), "peak_through_baseline": round(peak_baseline / 2**20),
                          "peak": round(rss.peak / 2**20), "end": round(end_rss / 2**20)},
        "server_alive_after": alive,
        "wall_s": round(time.perf_counter() - t0, 1),
        "goals": {"requests_without_status": 0, "big_status": "400", "p95_with_big_over_baseline_at_most": 2.0},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average_at_start": load_at_start,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
