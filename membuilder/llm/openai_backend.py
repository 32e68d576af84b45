"""``ChatModel`` over any OpenAI-compatible HTTP server, spoken to with ``httpx`` directly.

Works with ``vllm serve``, SGLang, the llama.cpp server, Ollama (``/v1``), hosted APIs and our
own ``memgym serve``. What it adds over a bare HTTP call:

- concurrency: the conversations of one ``generate`` go out in parallel, at most
  ``max_concurrency`` requests in flight (a server with continuous batching then sees a batch);
- a per-request ``timeout_s``, and up to ``max_retries`` retries with exponential backoff on
  timeouts, connection errors, 429 and 5xx (a ``Retry-After`` header is honoured, capped);
- JSON output: a ``Sampling.json_schema`` is sent as ``response_format`` ``json_schema``; a server
  that rejects that (400) is asked again with ``json_object``, then with no format, and the
  fallback is remembered for the rest of the run;
- usage: the server's ``usage`` block is booked per purpose; a failure after the retries raises
  ``ModelCallError``: a model call never quietly returns an empty answer.

The API key is read from the environment variable named by ``api_key_env`` and kept out of
``repr``, errors and logs.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from membuilder.llm.base import (
    ChatMessages,
    Completion,
    Sampling,
    UsageLedger,
    check_conversations,
    check_sampling,
)

RETRY_STATUSES = {408, 409, 425, 429, 500, 502, 503, 504}
JSON_MODES = ("json_schema", "json_object", "none")


class ModelCallError(RuntimeError):
    """A model server did not give a usable answer (after the allowed retries)."""


class OpenAIHTTP:
    """POSTs JSON to one OpenAI-compatible base URL with a timeout, retries and a concurrency cap."""

    def __init__(self, base_url: str, api_key_env: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, backoff_s: float = 0.5, max_concurrency: int = 8):
        import httpx

        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency < 1 or max_retries < 0 or timeout_s <= 0:
            raise ValueError("need max_concurrency >= 1, max_retries >= 0 and timeout_s > 0")
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        headers = {"Content-Type": "application/json"}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(f"environment variable {api_key_env} (named by api_key_env) is not set")
            headers["Authorization"] = f"Bearer {key}"
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.max_concurrency = max_concurrency
        self._httpx = httpx
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency))
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self.retries = 0  # retries made so far, for reports

    def __repr__(self) -> str:
        return f"OpenAIHTTP({self.base_url!r}, api_key_env={self.api_key_env!r})"

    def close(self) -> None:
        self._client.close()

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``base_url + path``; return the decoded JSON or raise ``ModelCallError``.

        A 4xx other than the retryable ones raises at once (``ModelCallError.status`` holds it),
        since asking again cannot help."""
        url = f"{self.base_url}{path}"
        httpx = self._httpx
        last = ""
        for attempt in range(self.max_retries + 1):
            wait = self.backoff_s * (2 ** attempt) * (0.5 + random.random())
            try:
                with self._slots:
                    response = self._client.post(url, content=json.dumps(body))
            except httpx.TimeoutException:
                last = f"no answer within {self.timeout_s:g} s"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    try:
                        return response.json()
                    except ValueError:
                        last = f"200 with a body that is not JSON: {response.text[:200]!r}"
                elif response.status_code in RETRY_STATUSES:
                    last = f"HTTP {response.status_code}: {response.text[:200]}"
                    wait = max(wait, min(_retry_after(response), 30.0))
                else:
                    err = ModelCallError(f"POST {url}: HTTP {response.status_code}: {response.text[:500]}")
                    err.status = response.status_code
                    raise err
            if attempt < self.max_retries:
                self.retries += 1
                time.sleep(wait)
        err = ModelCallError(f"POST {url} failed after {self.max_retries + 1} attempts; last: {last}")
        err.status = None
        raise err

    def get(self, path: str) -> dict[str, Any]:
        response = self._client.get(f"{self.base_url}{path}")
        response.raise_for_status()
        return response.json()


def _retry_after(response) -> float:
    try:
        return float(response.headers.get("retry-after", 0))
    except ValueError:
        return 0.0


class OpenAIChatModel:
    """``ChatModel`` over ``POST {base_url}/chat/completions``.

    ``base_url`` includes the version prefix, e.g. ``http://127.0.0.1:8000/v1``. ``json_mode``
    picks how a ``Sampling.json_schema`` is sent first ("json_schema", "json_object" or "none").
    Completions carry no token ids (the API does not return them); token counts come from the
    server's ``usage``.
    """

    supports_json_schema = True

    def __init__(self, model: str, base_url: str, *, api_key_env: str | None = None, name: str | None = None,
                 max_concurrency: int = 8, timeout_s: float = 120.0, max_retries: int = 3,
                 backoff_s: float = 0.5, json_mode: str = "json_schema",
                 chat_template_kwargs: dict[str, Any] | None = None):
        if not model:
            raise ValueError("OpenAIChatModel needs a model name (what the server calls it)")
        if json_mode not in JSON_MODES:
            raise ValueError(f"json_mode must be one of {JSON_MODES}, got {json_mode!r}")
        self.model = model
        self.name = name or f"openai:{model}@{base_url}"
        self.http = OpenAIHTTP(base_url, api_key_env, timeout_s, max_retries, backoff_s, max_concurrency)
        self.json_mode = json_mode
        # Sent with every chat request (vLLM and SGLang pass them to the chat template), e.g.
        # {"enable_thinking": False} so a Qwen3 answerer answers instead of thinking to its token limit.
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, dict):
            raise ValueError(f"chat_template_kwargs must be a mapping, got {chat_template_kwargs!r}")
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.ledger = UsageLedger()
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="memgym-openai")

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.http.base_url!r})"

    @property
    def engine(self) -> str:
        """What runs this model, for reports: the server answers for its own engine."""
        return f"served at {self.http.base_url}"

    @property
    def usage(self):
        return self.ledger.total

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self.http.close()

    # ---- generation ----------------------------------------------------------------------
    def generate(self, conversations: list[ChatMessages], sampling: Sampling | None = None, *,
                 purpose: str | None = None) -> list[Completion]:
        conversations = check_conversations(conversations, f"{self.name}.generate")
        sampling = check_sampling(sampling, f"{self.name}.generate")
        started = time.perf_counter()
        # One request per sample, so n works on servers that ignore "n"; sample j gets seed + j.
        jobs = [(conv, j) for conv in conversations for j in range(sampling.n)]
        results = list(self._pool.map(lambda job: self._one(job[0], sampling, job[1]), jobs))
        completions = [c for c, _ in results]
        prompt = sum(u.get("prompt_tokens", 0) for _, u in results)
        produced = sum(u.get("completion_tokens", 0) for _, u in results)
        self.ledger.record(purpose, len(conversations), prompt, produced, time.perf_counter() - started)
        return completions

    def _body(self, conv: ChatMessages, sampling: Sampling, sample_index: int, json_mode: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": conv, "max_tokens": sampling.max_new_tokens,
                                "temperature": sampling.temperature, "n": 1}
        if not sampling.greedy:
            body["top_p"] = sampling.top_p
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            body["seed"] = int(sampling.seed) + sample_index
        if sampling.min_new_tokens:
            body["min_tokens"] = sampling.min_new_tokens  # a vLLM / memgym serve extension
        if sampling.json_schema is not None and json_mode == "json_schema":
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "reply", "schema": sampling.json_schema}}
        elif sampling.json_schema is not None and json_mode == "json_object":
            body["response_format"] = {"type": "json_object"}
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = self.chat_template_kwargs
        return body

    def _one(self, conv: ChatMessages, sampling: Sampling, sample_index: int) -> tuple[Completion, dict]:
        started = time.perf_counter()
        while True:
            mode = self.json_mode
            try:
                data = self.http.post("/chat/completions", self._body(conv, sampling, sample_index, mode))
                break
            except ModelCallError as exc:
                # A server without structured output rejects response_format: step down once per mode.
                if exc.status == 400 and sampling.json_schema is not None and mode != "none":
                    self.json_mode = JSON_MODES[JSON_MODES.index(mode) + 1]
                    continue
                raise
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelCallError(f"{self.name}: reply has no choices[0].message: {json.dumps(data)[:300]}") from exc
        if text is None:
            raise ModelCallError(f"{self.name}: reply has no text content: {json.dumps(data)[:300]}")
        usage = data.get("usage") or {}
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        completion = Completion(text=text, token_ids=[], finish_reason=finish,
                                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                                completion_tokens=int(usage.get("completion_tokens", 0)),
                                latency_s=time.perf_counter() - started)
        return completion, usage

    # ---- scoring -------------------------------------------------------------------------
    def choice_logprobs(self, conversation: ChatMessages, choices: list[str], *,
                        purpose: str | None = None) -> list[float]:
        """Summed log-probability of each choice, from the server's prompt log-probs.

        Sends the conversation with the choice as a final assistant message to continue
        (``continue_final_message``) and asks for ``prompt_logprobs``: an extension that
        ``vllm serve`` and ``memgym serve`` understand. The choice's tokens are the tail of the
        prompt whose decoded text covers the choice. Other servers raise ``ModelCallError``.
        """
        conversation = check_conversations([conversation], f"{self.name}.choice_logprobs")[0]
        if not choices or not all(isinstance(c, str) and c for c in choices):
            raise ValueError(f"{self.name}.choice_logprobs: choices must be a non-empty list of non-empty strings")
        started = time.perf_counter()

        def score(choice: str) -> tuple[float, int]:
            body = {"model": self.model, "messages": conversation + [{"role": "assistant", "content": choice}],
                    "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0,
                    "add_generation_prompt": False, "continue_final_message": True}
            if self.chat_template_kwargs:
                body["chat_template_kwargs"] = self.chat_template_kwargs
            data = self.http.post("/chat/completions", body)
            entries = data.get("prompt_logprobs")
            if not entries:
                raise ModelCallError(f"{self.name}: server returned no prompt_logprobs; choice_logprobs needs "
                                     "vllm serve or memgym serve")
            return _tail_logprob(entries, choice), len(entries)

        results = list(self._pool.map(score, choices))
        self.ledger.record(purpose, 1, sum(n for _, n in results), 0, time.perf_counter() - started)
        return [s for s, _ in results]

    def count_tokens(self, text: str) -> int:
        """Exact count from the server's ``/tokenize`` (vLLM, memgym serve) when it has one, else
        an estimate of one token per 4 characters."""
        root = self.http.base_url.removesuffix("/v1")
        try:
            data = self.http._client.post(f"{root}/tokenize", content=json.dumps({"model": self.model, "prompt": text}),
                                          timeout=self.http.timeout_s)
            if data.status_code == 200:
                return int(data.json()["count"])
        except (self.http._httpx.HTTPError, KeyError, ValueError):
            pass
        return max(1, (len(text) + 3) // 4) if text else 0


def _tail_logprob(entries: list, choice: str) -> float:
    """Sum the log-probs of the last prompt tokens whose decoded text covers ``choice``.

    Each entry is ``None`` (first token) or ``{token_id: {"logprob": x, "decoded_token": s, ...}}``
    as vLLM returns them; with ``prompt_logprobs=0`` the dict holds the prompt token itself."""
    total, covered = 0.0, ""
    for entry in reversed(entries):
        if not entry:
            break
        info = next(iter(entry.values()))
        total += float(info["logprob"])
        covered = (info.get("decoded_token") or "") + covered
        if len(covered.strip()) >= len(choice.strip()):
            return total
    raise ModelCallError(f"prompt_logprobs do not cover the choice {choice!r}")
