"""``GenerationBatcher``: concurrent chat requests of ``memgym serve`` gathered into batched
``generate`` calls, run on one thread of their own."""

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


class GenerationBatcher:
    """Runs chat requests in batches: requests with equal sampling settings that arrive within
    ``window_s`` of each other (up to ``max_batch``) share one ``generate`` call. A job whose
    client left before its batch started is dropped; a running batch is stopped when every job
    in it is gone (for models whose ``generate`` takes ``should_stop``)."""

    def __init__(self, model: Any, max_batch: int = 16, window_s: float = 0.01):
        self.model, self.max_batch, self.window_s = model, max_batch, window_s
        try:
            self._can_stop = "should_stop" in inspect.signature(model.generate).parameters
        except (TypeError, ValueError):
            self._can_stop = False
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="memgym-serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, conversation: list[dict], sampling: Sampling, prompt_tokens: int = 0) -> Job:
        job = Job(conversation, sampling, bucket=max(0, prompt_tokens - 1).bit_length() // 2)
        self._queue.put(job)
        return job

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        held: list = []  # jobs taken while gathering that belong to another batch
        while True:
            first = held.pop(0) if held else self._queue.get()
            if first is None:
                return
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
                (batch if _batch_key(job) == key else held).append(job)
            self._run(batch)

    def _run(self, batch: list[Job]) -> None:
        batch = [job for job in batch if not job.gone.is_set() and job.future.set_running_or_notify_cancel()]
        if not batch:
            return
        sampling = batch[0].sampling
        kwargs = {"should_stop": lambda: all(job.gone.is_set() for job in batch)} if self._can_stop else {}
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
