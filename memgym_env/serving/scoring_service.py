"""``POST /score``: MemoryGym-v0's session scorer behind HTTP, so scoring runs on other machines.

The service holds no state per client: each replica loads the same world, the same expert
snapshots and the same scoring models from one env config, and any replica scores any session
key. N replicas behind a load balancer (or a ``RemoteScorer`` given their URLs) then score N
sessions at once. Routes:

- ``GET  /sessions``: the session keys served, the reward density and the env config, which a
  client compares across replicas and against its own config before trusting the rewards;
- ``GET  /observation?session_key=K``: the construction observation of a session (what the
  policy's prompts render);
- ``GET  /expert?session_key=K``: the expert's four outputs for a session (what a plain GRPO
  reward writes for the agents a row does not train);
- ``POST /score``: ``{session_key, candidates, task_rewarded}`` -> ``{session_key, rewards,
  seconds}``, one reward per candidate (``memgym_env.serving.wire`` spells the format out);
- ``GET  /health`` and ``GET /scoring/health``: sessions served, requests waiting, sessions scored
  (with OpenEnv on, ``/health`` is OpenEnv's own and ``/scoring/health`` keeps these counters).

One replica scores one request at a time: scoring is CPU-bound and its models are not made for
concurrent calls, so a second request waits for the first instead of slowing both.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from typing import Any

from membuilder.plumbing.http import RequestError, guarded, json_app, json_response, read_json_body
from memgym_env.construction.scoring import SessionScorer
from memgym_env.serving.wire import dumps, read_score_request, reward_to_json


class ScoringService:
    def __init__(self, scorer: SessionScorer, max_body_bytes: int = 32 * 1024 * 1024,
                 lock: threading.Lock | None = None):
        self.scorer, self.max_body_bytes = scorer, max_body_bytes
        self.lock = lock or threading.Lock()  # shared with whatever else uses the scorer's models
        self.waiting = 0
        self.scored = 0

    def sessions(self) -> dict[str, Any]:
        return {"session_keys": self.scorer.session_keys(), "reward_density": self.scorer.reward_density,
                "config": asdict(self.scorer.config)}

    def observation(self, key: Any) -> dict[str, Any]:
        self._check_key(key)
        return dict(self.scorer.observation(key))

    def expert(self, key: Any) -> dict[str, str]:
        self._check_key(key)
        return self.scorer.expert_action(key)

    def score(self, body: dict[str, Any]) -> dict[str, Any]:
        key, candidates, rewarded = read_score_request(body)
        self._check_key(key)
        self.waiting += 1
        try:
            with self.lock:
                started = time.perf_counter()
                rewards = self.scorer.score(key, candidates, task_rewarded=rewarded)
                seconds = time.perf_counter() - started
                self.scored += 1
        finally:
            self.waiting -= 1
        return {"session_key": key, "rewards": [reward_to_json(r) for r in rewards], "seconds": seconds}

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "sessions": len(self.scorer.session_keys()), "waiting": self.waiting,
                "scored": self.scored}

    def _check_key(self, key: Any) -> None:
        if not isinstance(key, str) or not key:
            raise RequestError(f"'session_key' must be a non-empty string, got {key!r}")
        if key not in self.scorer:
            keys = self.scorer.session_keys()
            raise RequestError(f"'session_key' {key!r} is not served here: this replica serves {len(keys)} sessions "
                               f"({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''}); GET /sessions lists them",
                               status=404)

    # ---- HTTP ------------------------------------------------------------------------------
    def routes(self) -> list:
        from starlette.concurrency import run_in_threadpool
        from starlette.routing import Route

        async def sessions(request):
            return _ok(self.sessions())

        async def observation(request):
            return _ok(self.observation(request.query_params.get("session_key")))

        async def expert(request):
            return _ok(self.expert(request.query_params.get("session_key")))

        async def score(request):
            body = await read_json_body(request, self.max_body_bytes)
            return _ok(await run_in_threadpool(self.score, body))

        async def health(request):
            return _ok(self.health())

        return [Route("/sessions", guarded(sessions), methods=["GET"]),
                Route("/observation", guarded(observation), methods=["GET"]),
                Route("/expert", guarded(expert), methods=["GET"]),
                Route("/score", guarded(score), methods=["POST"]),
                Route("/health", guarded(health), methods=["GET"]),
                Route("/scoring/health", guarded(health), methods=["GET"])]

    def app(self):
        return json_app(self.routes())


def _ok(payload: Any):
    """200 with the wire's JSON: numpy values as numbers, and NaN refused rather than sent."""
    return json_response(200, payload, encode=dumps)
