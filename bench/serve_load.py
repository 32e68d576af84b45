"""``memgym serve`` under load and hostile clients: 100 concurrent small chats, alone, with a 1 MB
prompt, under 600 slow-header connections; 20 MB prompts; long ``prompt_logprobs`` requests.

Starts ``memgym serve`` with the real SmolLM2-135M (no embedder) on loopback as a subprocess,
then runs two rounds over loopback HTTP, each client on a connection of its own:

- ``baseline``: 100 small chat requests at once (``max_tokens`` 4);
- ``with_big_prompt``: a 1 MB prompt is sent first and, while it is in flight, the same 100
  small requests.

then three hostile rounds:

- ``slow_clients``: ``--slow`` connections (600) send request headers a byte a second and
  reconnect whenever the server cuts them, ``--idle`` more (100) connect and send nothing; while
  they are held the same small requests run (p95 against the baseline's), and each idle
  connection's time until the server closed it is recorded;
- ``large_prompt``: a ``--big-mb`` (20) MB prompt alone, two at once, and the longest prompt that
  passes the character check (``max_prompt_chars`` of ``/v1/models``: it is tokenized, then
  refused by its token count); status, seconds and the server's RSS over its idle size;
- ``prompt_logprobs``: a ``--logprobs-tokens`` (4096) token ``prompt_logprobs`` request with a
  4-token chat sent 1 s into it (the chat's wait), then the same request abandoned by its client
  after 2 s (seconds until the server dropped it, read from ``/health``'s ``scorings_dropped``).

Per round it records the status codes (a request that got no HTTP status at all, such as a
reset connection, counts under its exception's name), the small requests' p50/p95/max latency
and the wall time. Expected: every request answered, no resets; 200 for the small ones, 400 for
the 1 MB prompt (it does not fit the model's context); 429 only if the queue is full. The server
process's RSS (sampled every 20 ms, children included) is recorded idle, at its peak through the
baseline round, at its peak over the whole run and at the end.

    python bench/serve_load.py [--requests 100] [--max-tokens 4]   # -> bench/results/serve_load.json
    python bench/serve_load.py --short    # a few minutes: 8 requests, 200 slow, 512 tokens; -> /tmp
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


def start_server(model: str, max_batch: int, threads: int | None = None) -> tuple[subprocess.Popen, str, list[str]]:
    """``memgym serve`` on a free loopback port; returns the process, its /v1 URL and its log."""
    cmd = [sys.executable, "-m", "memgym_env.cli", "serve", "--model", model, "--no-embedder",
           "--host", "127.0.0.1", "--port", "0", "--max-batch", str(max_batch)] + (
               ["--threads", str(threads)] if threads else [])
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

    def window(self) -> int:
        """Start a new peak window: the peak from now on (read ``peak`` after)."""
        self.peak = self.now()
        return self.peak


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


def host_port(url: str) -> tuple[str, int]:
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    return host, int(port)


async def slow_clients(url: str, slow: int, idle: int, requests: int, max_tokens: int, timeout: float) -> dict:
    """Small requests while ``slow`` connections dribble headers and ``idle`` ones sit silent."""
    host, port = host_port(url)
    stop = asyncio.Event()
    cut = Counter()  # slow connections the server closed (and the attacker reopened)
    idle_closed: list[float] = []

    async def dribbler() -> None:
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 10_000
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:
                cut["connect_failed"] += 1
                await asyncio.sleep(1)
                continue
            try:
                for i in range(len(head)):
                    writer.write(head[i:i + 1])
                    await writer.drain()
                    try:  # a byte a second; the server's answer (408) or close ends this connection
                        await asyncio.wait_for(reader.read(1), 1.0)
                        break
                    except asyncio.TimeoutError:
                        pass
                    if stop.is_set():
                        break
            except OSError:
                pass
            cut["cut"] += not stop.is_set()
            writer.close()

    async def sitter() -> None:
        opened = time.perf_counter()
        reader, writer = await asyncio.open_connection(host, port)
        try:
            await asyncio.wait_for(reader.read(), 120)
            idle_closed.append(time.perf_counter() - opened)
        except (asyncio.TimeoutError, OSError):
            pass
        writer.close()

    tasks = [asyncio.create_task(dribbler()) for _ in range(slow)] + [asyncio.create_task(sitter()) for _ in range(idle)]
    await asyncio.sleep(2.0)  # every connection open and dribbling
    loaded = await round_(url, requests, max_tokens, big=False, timeout=timeout)
    await asyncio.sleep(max(0.0, 15.0 - loaded["wall_s"]))  # long enough for the idle ones to be cut
    stop.set()
    await asyncio.wait(tasks, timeout=15)
    for task in tasks:
        task.cancel()
    closed = sorted(idle_closed)
    loaded.update({"slow_connections": slow, "idle_connections": idle, "slow_cut_and_reopened": cut["cut"],
                   "connect_failed": cut["connect_failed"], "idle_closed": len(closed),
                   "idle_closed_after_s_max": round(closed[-1], 2) if closed else None})
    return loaded


async def post(url: str, body: dict, timeout: float) -> tuple[str, float, dict | None]:
    import httpx

    started = time.perf_counter()
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.post(f"{url}/chat/completions", json=body)
        status, payload = str(response.status_code), response.json()
    except httpx.HTTPError as exc:
        status, payload = type(exc).__name__, None
    return status, time.perf_counter() - started, payload


async def large_prompts(url: str, rss: PeakRSS, megabytes: int, timeout: float) -> dict:
    import httpx

    chars = httpx.get(f"{url}/models", timeout=30).json()["data"][0]["max_prompt_chars"]
    cases = {}
    for name, sizes in (("one", [megabytes * 2**20]), ("two_at_once", [megabytes * 2**20] * 2),
                        ("longest_passing_char_check", [chars])):
        before = rss.window()
        results = await asyncio.gather(*(post(url, {"messages": [{"role": "user", "content": "x" * n}],
                                                    "max_tokens": 4}, timeout) for n in sizes))
        await asyncio.sleep(1.0)  # the server trims after large bodies, off its event loop
        cases[name] = {"chars": sizes[0], "status": [r[0] for r in results],
                       "seconds": [round(r[1], 3) for r in results],
                       "rss_before_mb": round(before / 2**20), "peak_rss_over_before_mb": round((rss.peak - before) / 2**20),
                       "rss_after_mb": round(rss.now() / 2**20)}
    return cases


async def logprobs_round(url: str, tokens: int, rss: PeakRSS, timeout: float) -> dict:
    import httpx

    body = {"messages": [{"role": "user", "content": "word " * tokens}, {"role": "assistant", "content": "ok"}],
            "max_tokens": 1, "prompt_logprobs": 0, "continue_final_message": True}
    before = rss.window()
    long = asyncio.create_task(post(url, body, timeout))
    await asyncio.sleep(1.0)
    chat = await post(url, {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0},
                      timeout)
    status, seconds, payload = await long
    out = {"prompt_tokens": len(payload["prompt_logprobs"]) if payload and "prompt_logprobs" in payload else None,
           "status": status, "seconds": round(seconds, 2), "chat_status": chat[0], "chat_wait_s": round(chat[1], 3),
           "rss_before_mb": round(before / 2**20), "peak_rss_over_before_mb": round((rss.peak - before) / 2**20)}
    health = httpx.get(url.rsplit("/v1", 1)[0] + "/health", timeout=30).json()
    before = health["scorings_dropped"]
    abandoned = await post(url, body, 2.0)  # the client gives up after 2 s and closes its connection
    left = time.perf_counter()
    stopped = None
    while time.perf_counter() - left < 60:
        health = httpx.get(url.rsplit("/v1", 1)[0] + "/health", timeout=30).json()
        if health["scorings_dropped"] > before:
            stopped = round(time.perf_counter() - left, 3)
            break
        await asyncio.sleep(0.05)
    out.update({"abandoned_status": abandoned[0], "stopped_after_client_left_s": stopped})
    return out


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=300.0, help="per request, seconds")
    parser.add_argument("--slow", type=int, default=600, help="slow-header connections held in slow_clients")
    parser.add_argument("--idle", type=int, default=100, help="silent connections held in slow_clients")
    parser.add_argument("--big-mb", type=int, default=20, help="size of the large prompts, MB")
    parser.add_argument("--logprobs-tokens", type=int, default=4096, help="prompt tokens of the prompt_logprobs case")
    parser.add_argument("--threads", type=int, default=None, help="the server's --threads (default: its own)")
    parser.add_argument("--rounds", default="baseline,with_big_prompt,slow_clients,large_prompt,prompt_logprobs",
                        help="comma-separated rounds to run (baseline always runs: the others are compared to it)")
    parser.add_argument("--short", action="store_true",
                        help="a few minutes: 8 requests, 200 slow and 50 idle connections, 512 logprobs tokens; "
                             "writes /tmp/serve_load_short.json unless --out is given")
    parser.add_argument("--out", default=None, help="result file (default: bench/results/serve_load.json)")
    args = parser.parse_args()
    if args.short:
        args.requests, args.slow, args.idle, args.logprobs_tokens = 8, 200, 50, 512
    rounds = set(args.rounds.split(","))
    args.out = args.out or ("/tmp/serve_load_short.json" if args.short
                            else str(ROOT / "bench" / "results" / "serve_load.json"))

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    proc, url, log = start_server(args.model, args.max_batch, args.threads)
    startup_s = time.perf_counter() - t0
    try:
        with PeakRSS(proc.pid) as rss:
            idle_rss = rss.now()
            warm = asyncio.run(round_(url, 1, args.max_tokens, big=False, timeout=args.timeout))  # first-call costs
            warm_rss = rss.now()
            baseline = asyncio.run(round_(url, args.requests, args.max_tokens, big=False, timeout=args.timeout))
            print("baseline       ", json.dumps(baseline), flush=True)
            peak_baseline = rss.peak
            loaded = slow = large = logprobs = None
            if "with_big_prompt" in rounds:
                loaded = asyncio.run(round_(url, args.requests, args.max_tokens, big=True, timeout=args.timeout))
                print("with_big_prompt", json.dumps(loaded), flush=True)
            if "slow_clients" in rounds:
                slow = asyncio.run(slow_clients(url, args.slow, args.idle, args.requests, args.max_tokens,
                                                args.timeout))
                print("slow_clients   ", json.dumps(slow), flush=True)
            if "large_prompt" in rounds:
                large = asyncio.run(large_prompts(url, rss, args.big_mb, args.timeout))
                print("large_prompt   ", json.dumps(large), flush=True)
            if "prompt_logprobs" in rounds:
                logprobs = asyncio.run(logprobs_round(url, args.logprobs_tokens, rss, args.timeout))
                print("prompt_logprobs", json.dumps(logprobs), flush=True)
            end_rss = rss.now()
        alive = proc.poll() is None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()

    no_status = sum(count for r in (baseline, loaded, slow) if r for status, count in r["small_status"].items()
                    if not status.isdigit()) + bool(loaded and not loaded["big_status"].isdigit())

    def over_baseline(r: dict | None) -> float | None:
        return round(r["small_p95_s"] / baseline["small_p95_s"], 2) if r and r["small_p95_s"] and baseline["small_p95_s"] \
            else None

    result = {
        "model": args.model, "max_tokens": args.max_tokens, "max_batch": args.max_batch, "threads": args.threads,
        "rounds": sorted(rounds),
        "warmup": warm, "baseline": baseline, "with_big_prompt": loaded,
        "requests_without_status": no_status,
        "p95_with_big_over_baseline": over_baseline(loaded),
        "slow_clients": slow,
        "p95_with_slow_clients_over_baseline": over_baseline(slow),
        "large_prompt": large, "prompt_logprobs": logprobs,
        "server_startup_s": round(startup_s, 1),
        "server_rss_mb": {"idle": round(idle_rss / 2**20), "after_warmup": round(warm_rss / 2**20), "peak_through_baseline": round(peak_baseline / 2**20),
                          "peak": round(rss.peak / 2**20), "end": round(end_rss / 2**20)},
        "server_alive_after": alive,
        "wall_s": round(time.perf_counter() - t0, 1),
        "goals": {"requests_without_status": 0, "big_status": "400", "p95_with_big_over_baseline_at_most": 2.0,
                  "p95_with_slow_clients_over_baseline_at_most": 2.0, "idle_closed_after_s_at_most": 30,
                  "large_prompt_status": "400 or 413", "large_prompt_seconds_under": 1.0,
                  "large_prompt_peak_rss_over_idle_mb_under": 100, "rss_after_within_of_idle": 0.2,
                  "chat_wait_behind_logprobs_s_under": 2.0, "stopped_after_client_left_s_under": 1.0},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average_at_start": load_at_start,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
