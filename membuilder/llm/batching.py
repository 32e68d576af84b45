"""``GenerationBatcher``: concurrent chat requests of ``memgym serve`` gathered into batched
``generate`` calls, run on one thread of their own, with ``prompt_logprobs`` scorings
(``membuilder.llm.prompt_scoring``) run a chunk at a time between the batches: a short chat
waits for at most one chunk of a long scoring, never for all of it."""

from __future__ import annotations

import inspect
import json
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from membuilder.llm.base import Sampling


@dataclass
class Job:
    conversation: list[dict]
    sampling: Sampling
    bucket: int  # prompts of very different lengths are not batched together (padding cost)
    future: Future = field(default_factory=Future)
    gone: threading.Event = field(default_factory=threading.Event)  # the client disconnected


@dataclass
class ScoreJob:
    scoring: Any  # an object with step() -> bool (True when finished) and result()
    future: Future = field(default_factory=Future)
    gone: threading.Event = field(default_factory=threading.Event)  # the client disconnected


class GenerationBatcher:
    """Runs chat requests in batches: requests with equal sampling settings that arrive within
    ``window_s`` of each other (up to ``max_batch``) share one ``generate`` call. A job whose
    client left before its batch started is dropped; a running batch is stopped when every job
    in it is gone (for models whose ``generate`` takes ``should_stop``). Scorings in progress take
    turns, one chunk each, whenever no chat request is waiting or after each batch; a scoring whose
    client left is dropped before its next chunk. ``context_length`` (the server's, which it has
    already checked every prompt against) replaces the model's own for models whose ``generate``
    takes it, so a server given a longer context than the model's config is not cut back to it."""

    def __init__(self, model: Any, max_batch: int = 16, window_s: float = 0.01, context_length: int | None = None):
        self.model, self.max_batch, self.window_s = model, max_batch, window_s
        try:
            accepts = inspect.signature(model.generate).parameters
        except (TypeError, ValueError):
            accepts = {}
        self._can_stop = "should_stop" in accepts
        self._context = {"context_length": context_length} if context_length and "context_length" in accepts else {}
        self._queue: queue.Queue = queue.Queue()
        self.scorings_dropped = 0  # scorings stopped because their client left (for /health and tests)
        self._thread = threading.Thread(target=self._loop, name="memgym-serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, conversation: list[dict], sampling: Sampling, prompt_tokens: int = 0) -> Job:
        job = Job(conversation, sampling, bucket=max(0, prompt_tokens - 1).bit_length() // 2)
        self._queue.put(job)
        return job

    def submit_scoring(self, scoring: Any) -> ScoreJob:
        job = ScoreJob(scoring)
        self._queue.put(job)
        return job

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        held: list = []  # jobs taken while gathering that belong to another batch
        scoring: list[ScoreJob] = []  # scorings in progress, taking turns
        while True:
            if held:
                first = held.pop(0)
            elif scoring:
                try:
                    first = self._queue.get_nowait()
                except queue.Empty:
                    self._score_one(scoring)
                    continue
            else:
                first = self._queue.get()
            if first is None:
                for job in scoring:
                    if not job.future.cancel():
                        job.future.set_exception(RuntimeError("the server is stopping"))
                return
            if isinstance(first, ScoreJob):
                scoring.append(first)
                continue
            batch, key = [first], _batch_key(first)
            deadline = time.monotonic() + self.window_s
            while len(batch) < self.max_batch:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    job = self._queue.get(timeout=timeout)
                except queue.Empty:
                    break
                if job is None:
                    self._queue.put(None)  # finish this batch, then stop
                    break
                if isinstance(job, ScoreJob):
                    scoring.append(job)
                    continue
                (batch if _batch_key(job) == key else held).append(job)
            self._run(batch)
            if scoring:
                self._score_one(scoring)

    def _score_one(self, scoring: list[ScoreJob]) -> None:
        """One chunk of the first scoring; it then goes to the back of the line (or leaves, finished)."""
        job = scoring.pop(0)
        if job.gone.is_set():  # its client left: the KV cache and partial results go with it
            self.scorings_dropped += 1
            if not job.future.cancel():
                job.future.set_exception(RuntimeError("the client closed the connection"))
            return
        if not job.future.running() and not job.future.set_running_or_notify_cancel():
            return
        try:
            finished = job.scoring.step()
            if finished:
                job.future.set_result(job.scoring.result())
                return
        except Exception as exc:  # the error belongs to the caller, the batcher keeps serving
            job.future.set_exception(exc)
            return
        scoring.append(job)

    def _run(self, batch: list[Job]) -> None:
        batch = [job for job in batch if not job.gone.is_set() and job.future.set_running_or_notify_cancel()]
        if not batch:
            return
        sampling = batch[0].sampling
        kwargs = {"should_stop": lambda: all(job.gone.is_set() for job in batch)} if self._can_stop else {}
        kwargs.update(self._context)
        try:
            completions = self.model.generate([job.conversation for job in batch], sampling, purpose="serve", **kwargs)
        except Exception as exc:  # the error belongs to the callers, the batcher keeps serving
            for job in batch:
                job.future.set_exception(exc)
            return
        for i, job in enumerate(batch):
            job.future.set_result(completions[i * sampling.n:(i + 1) * sampling.n])


def _batch_key(job: Job) -> str:
    s = job.sampling
    return json.dumps([s.temperature, s.top_p, s.max_new_tokens, s.n, s.stop, s.seed, s.min_new_tokens, job.bucket])
