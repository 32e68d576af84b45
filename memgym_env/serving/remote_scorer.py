"""``RemoteScorer``: the trainer's ``CandidateScorer`` over ``memgym serve-env`` replicas.

Give it one URL (a load balancer, a Kubernetes service) or several (used round-robin). A
request that fails to connect, times out or gets 429/5xx is sent again to the next replica, at
most ``retries`` more times; then the call raises ``RemoteScoringError`` with every attempt in
its message. A 4xx answer is the request's fault and raises at once. A reply is checked field by
field before the trainer sees it: no path turns a failure into a zero reward.

At construction every replica is asked what it serves; replicas that disagree with each other,
or with the env config the run names (``expected_config``), are refused, so a run cannot mix
rewards from different worlds or reward settings.
"""

from __future__ import annotations

import itertools
import json
import queue
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, is_dataclass
from typing import Any

import httpx

from membuilder.plumbing.http import api_key_or_env
from membuilder.reward import CandidateReward
from memgym_env.serving.wire import dumps, reward_from_json, score_request

RETRY_STATUS = (429, 500, 502, 503, 504)


class RemoteScoringError(RuntimeError):
    """Every replica tried for a request failed."""


class RemoteScorer:
    def __init__(self, urls: str | Sequence[str], *, timeout_s: float = 300.0, connect_timeout_s: float = 5.0,
                 retries: int = 2, backoff_s: float = 0.2, api_key: str | None = None,
                 expected_config: Any = None):
        if isinstance(urls, str):
            urls = [u for u in urls.split(",")]
        self.urls = [u.strip().rstrip("/") for u in urls if u and u.strip()]
        if not self.urls:
            raise ValueError("RemoteScorer needs at least one replica URL, e.g. http://127.0.0.1:8100")
        for u in self.urls:
            if not u.startswith(("http://", "https://")):
                raise ValueError(f"replica URL {u!r} must start with http:// or https://")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a whole number >= 0, got {retries!r}")
        if not timeout_s > 0 or not connect_timeout_s > 0:
            raise ValueError(f"timeouts must be > 0, got timeout_s={timeout_s}, connect_timeout_s={connect_timeout_s}")
        self.retries, self.backoff_s = retries, backoff_s
        key = api_key_or_env(api_key)
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._clients = [http_client(u, timeout, headers) for u in self.urls]
        self._turn = itertools.count()
        self._turn_lock = threading.Lock()
        self._observations: dict[str, Mapping[str, Any]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.attempts_failed = 0  # requests that were retried on another replica, for logs and tests

        described = [self._describe(i) for i in range(len(self.urls))]
        first = described[0]
        for url, other in zip(self.urls[1:], described[1:]):
            if other != first:
                differ = [k for k in first if first[k] != other.get(k)]
                raise ValueError(f"replicas {self.urls[0]} and {url} serve different sessions or settings "
                                 f"(they differ in {differ}); start every replica from the same env config")
        self.config: dict[str, Any] = first["config"]
        self.reward_density: int = first["reward_density"]
        self._keys: list[str] = list(first["session_keys"])
        if expected_config is not None:
            self._check_config(expected_config)

    # ---- the CandidateScorer interface -----------------------------------------------------
    def session_keys(self) -> list[str]:
        return list(self._keys)

    def observation(self, session_key: str) -> Mapping[str, Any]:
        if session_key not in self._observations:
            data = self._request("GET", "/observation", params={"session_key": session_key})
            self._observations[session_key] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return self._observations[session_key]

    def expert_action(self, session_key: str) -> dict[str, str]:
        return dict(self._request("GET", "/expert", params={"session_key": session_key}))

    def score(self, session_key: str, candidates: Sequence[Mapping[str, str]], *,
              task_rewarded: bool = True) -> list[CandidateReward]:
        return self._score(session_key, candidates, task_rewarded)

    def score_many(self, requests: Sequence[tuple[str, Sequence[Mapping[str, str]], bool]]) -> list[list[CandidateReward]]:
        """Several sessions at once, spread over the replicas; results in request order.

        One worker per replica takes the next session from a shared queue and sends it to its own
        replica first: a worker that finishes early takes more work, and no replica waits while two
        requests queue on another (a shared round-robin turn does that when replies come out of order)."""
        if len(requests) <= 1 or len(self.urls) == 1:
            return [self._score(k, c, r) for k, c, r in requests]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=len(self.urls), thread_name_prefix="memgym-remote-score")
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for i, request in enumerate(requests):
            todo.put((i, request))
        results: list[list[CandidateReward] | None] = [None] * len(requests)
        failed = threading.Event()

        def work(replica: int) -> None:
            while not failed.is_set():
                try:
                    i, (key, candidates, rewarded) = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results[i] = self._score(key, candidates, rewarded, first=replica)
                except BaseException:
                    failed.set()  # the others stop taking work: the batch fails as a whole
                    raise

        workers = [self._pool.submit(work, j) for j in range(min(len(self.urls), len(requests)))]
        for w in workers:
            w.result()
        return results  # type: ignore[return-value]  # every slot is filled when no worker raised

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for client in self._clients:
            client.close()

    # ---- internals ------------------------------------------------------------------------
    def _describe(self, i: int) -> dict[str, Any]:
        try:
            response = self._clients[i].get("/sessions")
        except httpx.HTTPError as exc:
            raise RemoteScoringError(f"replica {self.urls[i]} cannot be reached ({type(exc).__name__}: {exc}); "
                                     "is `memgym serve-env` running there?") from exc
        data = self._json(response, self.urls[i], "/sessions")
        if not isinstance(data.get("session_keys"), list) or not isinstance(data.get("config"), dict) \
                or not isinstance(data.get("reward_density"), int):
            raise RemoteScoringError(f"replica {self.urls[i]}/sessions: not a memgym serve-env answer: {str(data)[:200]}")
        return data

    def _check_config(self, expected: Any) -> None:
        want = asdict(expected) if is_dataclass(expected) else dict(expected)
        want = json.loads(dumps(want))  # through JSON, so tuples and lists compare as the replica sent them
        differ = {k: (self.config.get(k), v) for k, v in want.items() if self.config.get(k) != v}
        if differ:
            lines = "; ".join(f"{k}: replicas {a!r}, this run {b!r}" for k, (a, b) in sorted(differ.items()))
            raise ValueError(f"the scoring replicas ({', '.join(self.urls)}) run another env config than this run "
                             f"names: {lines}. Start them with the run's env_config and env_overrides.")

    def _score(self, session_key: str, candidates: Sequence[Mapping[str, str]], task_rewarded: bool,
               first: int | None = None) -> list[CandidateReward]:
        body = score_request(session_key, candidates, task_rewarded)
        data = self._request("POST", "/score", first=first, content=dumps(body))
        return self._rewards(data, session_key, len(candidates))

    def _rewards(self, data: dict, session_key: str, g: int) -> list[CandidateReward]:
        rewards = data.get("rewards")
        if data.get("session_key") != session_key or not isinstance(rewards, list) or len(rewards) != g:
            raise RemoteScoringError(f"replica answered session {data.get('session_key')!r} with "
                                     f"{len(rewards) if isinstance(rewards, list) else 'no'} rewards; asked "
                                     f"{session_key!r} with {g} candidates")
        try:
            return [reward_from_json(r, f"rewards[{k}]") for k, r in enumerate(rewards)]
        except ValueError as exc:
            raise RemoteScoringError(f"session {session_key!r}: malformed reward from the replica: {exc}") from exc

    def _request(self, method: str, path: str, first: int | None = None, **kwargs) -> dict:
        """Sent to replica ``first`` (the next in turn when None), then to the following ones on failure."""
        if first is None:
            with self._turn_lock:
                start = next(self._turn)
        else:
            start = first
        failures = []
        for attempt in range(self.retries + 1):
            i = (start + attempt) % len(self.urls)
            url = self.urls[i]
            try:
                response = self._clients[i].request(method, path, **kwargs)
            except httpx.TransportError as exc:  # refused, reset, timed out: another replica may answer
                failures.append(f"{url}: {type(exc).__name__}: {exc or 'no detail'}")
            else:
                if response.status_code not in RETRY_STATUS:
                    return self._json(response, url, path)
                failures.append(f"{url}: HTTP {response.status_code}: {_message(response)}")
            self.attempts_failed += 1
            if attempt < self.retries:
                time.sleep(self.backoff_s * (attempt + 1))
        raise RemoteScoringError(f"{method} {path} failed on {len(failures)} attempt(s) "
                                 f"(retries={self.retries}): " + " | ".join(failures))

    @staticmethod
    def _json(response: httpx.Response, url: str, path: str) -> dict:
        if response.status_code != 200:
            raise ValueError(f"{url}{path}: HTTP {response.status_code}: {_message(response)}")
        try:
            data = response.json()
        except ValueError as exc:
            raise RemoteScoringError(f"{url}{path}: the answer is not JSON: {response.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise RemoteScoringError(f"{url}{path}: expected a JSON object, got {str(data)[:200]}")
        return data


def http_client(base_url: str, timeout: httpx.Timeout | float, headers: dict[str, str] | None = None) -> httpx.Client:
    """A keep-alive client with Nagle's algorithm off: a request goes out as headers then body, and
    with Nagle on, the body waits for the server's delayed ACK of the headers (about 40 ms a call)."""
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    return httpx.Client(base_url=base_url, timeout=timeout, headers=headers, transport=transport)


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300]
