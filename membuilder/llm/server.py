"""``memgym serve``: an OpenAI-compatible HTTP server over a local ``ChatModel`` and ``Embedder``.

Lets any tool that speaks the OpenAI API use a local (e.g. freshly trained) checkpoint. Runs on
Starlette under uvicorn (HTTP/1.1 with keep-alive, a listen backlog of 2048) through the project's
one HTTP stack, ``membuilder.plumbing.http``, which ``memgym serve-env`` uses too.

Endpoints
- ``GET  /v1/models``: the served chat model and embedder.
- ``POST /v1/chat/completions``: ``messages``, ``max_tokens`` (or ``max_completion_tokens``),
  ``temperature`` (default 1, as in the OpenAI API), ``top_p``, ``n``, ``stop``, ``seed``,
  ``min_tokens`` (vLLM's name). Also
  the vLLM extension ``prompt_logprobs`` with ``continue_final_message`` (used by the openai
  backend's ``choice_logprobs``). ``response_format`` with a JSON schema is refused with 400:
  this server cannot constrain decoding, and saying so lets a client fall back knowingly.
  ``json_object`` is refused too. Started with ``unconstrained_json`` (``--unconstrained-json``),
  the server answers both with an unconstrained reply that the client's own parser judges (what
  Mem0's and A-Mem's writes need: they treat an unreadable reply as a failed write).
  Streaming is not offered.
- ``POST /v1/embeddings``: ``input`` (a string or a list of at most 2048 strings).
- ``POST /tokenize``: ``prompt`` -> ``{"tokens": [...], "count": n}`` (as vLLM).
- ``GET  /health`` (open without the key).

Limits (``ServeLimits``), so that no request can hold the server:
- a ``model`` other than the served name (or the embedder's, on ``/v1/embeddings``) gets 404, as
  OpenAI's API answers an unknown model; a request without ``model`` is served;
- a prompt is first measured in characters, before any tokenizing: a token of this tokenizer
  spans at most ``max_token_chars`` characters (its longest vocabulary entry: 81 for SmolLM2, a
  newline and 80 spaces), so a prompt longer than ``context_length * max_token_chars``
  characters cannot fit and gets 400 at once (a 20 MB prompt used to be tokenized for 81 s);
- the prompt must fit the model's context (``prompt_tokens < context_length``, else 400), and
  ``max_tokens`` must be a whole number from 1 to the context length (else 400); it is then
  lowered to ``max_tokens`` of the limits and to what the context leaves after the prompt
  (``finish_reason`` "length" tells the client);
- at most ``max_queue`` model requests wait or run at once; one more is answered 429 with
  ``Retry-After`` (the openai backend retries those); past that, uvicorn answers 503;
- a body over ``max_body_bytes`` gets 413 (by default 6 bytes per prompt character allowed, the
  size of a JSON ``\\uXXXX`` escape, plus 1 MiB: about 5 MB for SmolLM2's 8192 tokens); a body
  that is not UTF-8 JSON (``NaN`` and
  ``Infinity`` included), a wrong type or range, gets 400; a malformed request line or header
  (``Content-Length: abc``) gets 400 from uvicorn;
- a client that disconnects cancels its generation (the batch stops at the next token when
  every request in it is gone);
- slow and idle clients: a connection's request headers must be complete ``header_timeout_s``
  after it opens or its last response ends (else 408 and close, however slowly bytes trickle in),
  its body within ``body_timeout_s``; idle keep-alive connections close after ``keep_alive_s``;
  past ``max_connections`` open connections a new one evicts the one that has waited longest
  for its headers; the 503 limit counts requests in progress, not open connections
  (``membuilder.plumbing.http_guard``);
- after a request with a body over 256 KiB (or a prompt_logprobs of over 1024 tokens) the server
  collects garbage and returns freed heap pages to the system (glibc ``malloc_trim``), so a large
  request does not leave the resident size at its peak;
- ``prompt_logprobs`` requests run through the batcher a chunk of positions at a time
  (``membuilder.llm.prompt_scoring``): chats interleave with them, a client that leaves stops
  its scoring before the next chunk, and only the asked-for token's log-probability is kept per
  position (no log-softmax over the vocabulary at every position);
- with an API key (``api_key``), every route but ``/health`` needs ``Authorization: Bearer KEY``
  or ``X-Api-Key: KEY`` (401 otherwise, before routing). Binding an address beyond loopback
  without a key is refused.

Concurrent chat requests with the same sampling settings (and prompts of similar length) are
gathered for a few milliseconds and run as one batched ``generate``: a client sending 16
requests at once gets batched throughput.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from membuilder.llm.base import Sampling, check_conversations
from membuilder.llm.batching import GenerationBatcher, Job
from membuilder.llm.context_fit import model_context_length
from membuilder.llm.prompt_scoring import PromptScoring, WholeScoring, can_chunk
from membuilder.plumbing.http import (
    HttpServer,
    RequestError,
    ServerSettings,
    guarded,
    json_app,
    json_response,
    read_json_body,
)
from membuilder.plumbing.http_guard import release_memory

MAX_EMBED_INPUTS = 2048
OPEN_PATHS = ("/health", "/v1/health")  # answered without the API key
UNKNOWN_TOKEN_CHARS = 128  # characters per token assumed when the tokenizer's vocabulary cannot be read
RELEASE_AFTER_BYTES = 256 << 10  # a body this large is followed by release_memory()
BODY_SLACK_BYTES = 1 << 20  # the body limit's room for fields other than the prompt


@dataclass
class ServeLimits:
    """What one request may ask of ``memgym serve``."""

    context_length: int | None = None  # prompt + completion tokens; None: read from the model's config
    max_tokens: int = 2048  # completion tokens per request at most (a larger request is lowered to this)
    max_queue: int = 256  # model requests waiting or running at once; one more gets 429
    max_body_bytes: int | None = None  # request body size; larger gets 413 (None: matched to the context)
    header_timeout_s: float = 10.0  # request headers complete within this, from connect or last response
    body_timeout_s: float = 60.0  # request body complete within this, from its headers
    keep_alive_s: int = 5  # an idle keep-alive connection is closed after this
    max_connections: int = 1000  # open connections; one more evicts the one waiting longest for headers

    def __post_init__(self):
        for name in ("max_tokens", "max_queue", "max_body_bytes", "header_timeout_s", "body_timeout_s",
                     "keep_alive_s", "max_connections"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"ServeLimits.{name} must be > 0, got {value}")
        if self.context_length is not None and self.context_length < 2:
            raise ValueError(f"ServeLimits.context_length must be >= 2, got {self.context_length}")


def max_token_chars(model: Any) -> int:
    """The most characters one token of ``model``'s tokenizer can stand for: its longest vocabulary
    entry (byte-level BPE entries hold one character per byte, and a byte decodes to at most one
    character, so no token decodes to more). Unknown tokenizers: ``UNKNOWN_TOKEN_CHARS``."""
    try:
        vocab = model.tokenizer.get_vocab()
        return max(1, max(map(len, vocab)))
    except (AttributeError, TypeError, ValueError):
        return UNKNOWN_TOKEN_CHARS


def _number(body: dict, key: str, default, kind=float, low=None, high=None):
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
        raise RequestError(f"'{key}' must be a finite number, got {value!r}")
    given = value
    if kind is int:
        if value != int(value):
            raise RequestError(f"'{key}' must be a whole number, got {value!r}")
        value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise RequestError(f"'{key}' must be between {low} and {high}, got {given!r}")
    return kind(value)


def sampling_from_request(body: dict[str, Any], context_length: int = 1 << 20) -> Sampling:
    """Read OpenAI request fields into a ``Sampling``; a wrong type or range raises ``RequestError``.
    ``max_tokens`` is checked against ``context_length`` here, and lowered to fit later."""
    max_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and len(stop) <= 16
                                 and all(isinstance(s, str) and s for s in stop)):
        raise RequestError("'stop' must be a string or a list of at most 16 non-empty strings")
    max_new = _number(body, max_key, 256, int, 1, context_length)
    sampling = Sampling(
        temperature=_number(body, "temperature", 1.0, float, 0.0, 100.0),
        top_p=_number(body, "top_p", 1.0, float, 0.0, 1.0),
        max_new_tokens=max_new,
        n=_number(body, "n", 1, int, 1, 64),
        stop=stop or None,
        seed=_number(body, "seed", None, int, 0, 2**63 - 1),
        min_new_tokens=_number(body, "min_tokens", 0, int, 0, max_new),
    )
    if sampling.top_p <= 0:
        raise RequestError(f"'top_p' must be in (0, 1], got {sampling.top_p}")
    return sampling


# ---- the server --------------------------------------------------------------------------
class ModelServer:
    """The server object: ``start()`` in a background thread or ``serve_forever()`` in this one."""

    def __init__(self, chat_model: Any, embedder: Any = None, host: str = "127.0.0.1", port: int = 8000,
                 chat_name: str | None = None, embedder_name: str | None = None, max_batch: int = 16,
                 api_key: str | None = None, limits: ServeLimits | None = None, unconstrained_json: bool = False):
        self.chat_model, self.embedder = chat_model, embedder
        self.chat_name = chat_name or chat_model.name
        self.embedder_name = embedder_name or (embedder.name if embedder is not None else None)
        self.limits = limits or ServeLimits()
        self.context_length = self.limits.context_length or model_context_length(chat_model)
        self.api_key = api_key or None
        # A prompt longer than this many characters cannot fit the context, whatever its text.
        self.max_prompt_chars = self.context_length * max_token_chars(chat_model)
        self.max_body_bytes = self.limits.max_body_bytes or 6 * self.max_prompt_chars + BODY_SLACK_BYTES
        # Clients such as Mem0 and A-Mem ask for JSON on every call and parse the reply themselves,
        # counting a reply they cannot read as a failed write: an unconstrained reply is what they can use.
        self.unconstrained_json = unconstrained_json
        self.in_flight = 0  # model requests waiting or running (touched only on the event loop)
        # Requests beyond max_concurrency get 503 before routing; below it, the queue answers 429.
        lim = self.limits
        settings = ServerSettings(protocol="h11", keep_alive_s=lim.keep_alive_s, max_concurrency=2 * lim.max_queue + 64,
                                  header_timeout_s=lim.header_timeout_s, body_timeout_s=lim.body_timeout_s,
                                  max_connections=lim.max_connections)
        self.http = HttpServer(self._app(), host, port, self.api_key, name="memgym serve", settings=settings,
                               open_paths=OPEN_PATHS, error=_error)
        self.sock = self.http.sock
        self.batcher = GenerationBatcher(chat_model, max_batch=max_batch, context_length=self.context_length)
        self._embed_lock = threading.Lock()  # one encode at a time: torch threads already use the cores

    @property
    def url(self) -> str:
        return self.http.url + "/v1"

    def start(self) -> ModelServer:
        self.http.start()
        return self

    def serve_forever(self) -> None:
        self.http.serve_forever()

    def stop(self) -> None:
        self.http.stop()
        self.batcher.stop()

    # ---- endpoint bodies (plain functions of a parsed body) --------------------------------
    def models(self) -> dict:
        names = [self.chat_name] + ([self.embedder_name] if self.embedder is not None else [])
        return {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "memgym",
                                            "max_model_len": self.context_length,
                                            "max_prompt_chars": self.max_prompt_chars} for n in names]}

    def read_chat(self, body: dict) -> tuple[list[dict], Sampling | None]:
        """Validate a chat request; returns the conversation and its sampling (None for a
        prompt_logprobs request). Cheap: no tokenization."""
        if body.get("stream"):
            raise RequestError("streaming is not offered by memgym serve; send stream=false")
        fmt = body.get("response_format") or {}
        if isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object") and not self.unconstrained_json:
            raise RequestError(f"response_format '{fmt['type']}' is not supported: memgym serve cannot "
                               "constrain decoding; send the request without response_format")
        self.check_model(body, self.chat_name)
        try:
            conv = check_conversations([body.get("messages")], "messages")[0]
        except (TypeError, ValueError) as exc:
            raise RequestError(str(exc)) from exc
        self.check_chars(sum(len(m["content"]) for m in conv), "the prompt")
        if body.get("prompt_logprobs") is not None:
            return conv, None
        return conv, sampling_from_request(body, self.context_length)

    def check_model(self, body: dict, served: str | None) -> None:
        """An unknown ``model`` gets 404, as in OpenAI's API (none given: the served one)."""
        name = body.get("model")
        if name is not None and name != served:
            shown = name[:200] if isinstance(name, str) else repr(name)[:200]
            raise RequestError(f"the model '{shown}' does not exist: this server serves '{served}'", status=404)

    def check_chars(self, chars: int, what: str) -> None:
        """Refuse text that cannot fit the context, by its length alone (before any tokenizing)."""
        if chars > self.max_prompt_chars:
            raise RequestError(f"{what} has {chars} characters; this model's context is {self.context_length} "
                               f"tokens, which hold at most {self.max_prompt_chars} characters with this tokenizer")

    def prompt_tokens(self, conv: list[dict], continue_final: bool = False) -> int:
        render = getattr(self.chat_model, "render", None)
        if render is not None:
            return len(render(conv, continue_final=continue_final))
        return sum(self.chat_model.count_tokens(m["content"]) + 4 for m in conv) + 2

    def fit(self, sampling: Sampling, prompt_tokens: int) -> Sampling:
        """Check the prompt against the context and lower ``max_new_tokens`` to what is left."""
        room = self.context_length - prompt_tokens
        if room < 1:
            raise RequestError(f"the prompt has {prompt_tokens} tokens; this model's context is "
                               f"{self.context_length} tokens (prompt and completion together)")
        sampling.max_new_tokens = min(sampling.max_new_tokens, self.limits.max_tokens, room)
        sampling.min_new_tokens = min(sampling.min_new_tokens, sampling.max_new_tokens)
        return sampling

    def chat_response(self, completions: list, rid: str, created: int) -> dict:
        choices = [{"index": i, "message": {"role": "assistant", "content": c.text},
                    "finish_reason": c.finish_reason, "logprobs": None} for i, c in enumerate(completions)]
        prompt_tokens = completions[0].prompt_tokens
        produced = sum(c.completion_tokens for c in completions)
        return {"id": rid, "object": "chat.completion", "created": created, "model": self.chat_name,
                "choices": choices, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": produced,
                                              "total_tokens": prompt_tokens + produced}}

    def scoring(self, conv: list, body: dict):
        """The prompt_logprobs work for a request, checked against the context (tokenizes: run it
        off the event loop); the batcher runs it."""
        if not can_chunk(self.chat_model) and getattr(self.chat_model, "prompt_logprobs", None) is None:
            raise RequestError("this model cannot report prompt_logprobs")
        continue_final = bool(body.get("continue_final_message")) and conv[-1]["role"] == "assistant"
        render = getattr(self.chat_model, "render", None)
        if not can_chunk(self.chat_model) or render is None:
            length = self.prompt_tokens(conv, continue_final)
            if length > self.context_length:
                raise RequestError(f"the prompt has {length} tokens; this model's context is {self.context_length}")
            return WholeScoring(self.chat_model, conv, continue_final)
        ids = render(conv, continue_final=continue_final)
        if len(ids) > self.context_length:
            raise RequestError(f"the prompt has {len(ids)} tokens; this model's context is {self.context_length}")
        return PromptScoring(self.chat_model, ids)

    def logprobs_response(self, tokens: list, rid: str, created: int) -> dict:
        entries = [None if lp is None else {str(tok): {"logprob": lp, "rank": None, "decoded_token": text}}
                   for tok, text, lp in tokens]
        return {"id": rid, "object": "chat.completion", "created": created, "model": self.chat_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "length",
                             "logprobs": None}],
                "prompt_logprobs": entries,
                "usage": {"prompt_tokens": len(tokens), "completion_tokens": 0, "total_tokens": len(tokens)}}

    def embeddings(self, body: dict) -> dict:
        if self.embedder is None:
            raise RequestError("this server was started without an embedder", status=404)
        self.check_model(body, self.embedder_name)
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise RequestError("'input' must be a string or a list of strings")
        if len(texts) > MAX_EMBED_INPUTS:
            raise RequestError(f"'input' holds {len(texts)} strings; at most {MAX_EMBED_INPUTS} per request")
        longest = max(map(len, texts), default=0)
        self.check_chars(longest, "an 'input' string")  # embedders truncate, but tokenize all first
        with self._embed_lock:
            vectors = self.embedder.encode(texts)
        count = sum(max(1, len(t) // 4) for t in texts)  # an estimate: embedders do not report tokens
        return {"object": "list", "model": self.embedder_name,
                "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": count, "total_tokens": count}}

    def tokenize(self, body: dict) -> dict:
        text = body.get("prompt")
        if not isinstance(text, str):
            raise RequestError("'prompt' must be a string")
        self.check_chars(len(text), "'prompt'")
        tokenizer = getattr(self.chat_model, "tokenizer", None)
        tokens = tokenizer.encode(text, add_special_tokens=False) if tokenizer is not None else []
        return {"tokens": tokens, "count": len(tokens) if tokenizer is not None else self.chat_model.count_tokens(text)}

    # ---- HTTP ------------------------------------------------------------------------------
    def _app(self):
        from starlette.routing import Route

        routes = [Route(path, guarded(_releasing(handler), _error), methods=[method])
                  for method, paths, handler in (
                      ("GET", ("/v1/models", "/models"), self._models),
                      ("GET", OPEN_PATHS, self._health),
                      ("POST", ("/v1/chat/completions", "/chat/completions"), self._chat),
                      ("POST", ("/v1/embeddings", "/embeddings"), self._embeddings),
                      ("POST", ("/tokenize", "/v1/tokenize"), self._tokenize))
                  for path in paths]
        return json_app(routes, _error)

    @contextmanager
    def _slot(self):
        if self.in_flight >= self.limits.max_queue:
            raise RequestError(f"server busy: {self.in_flight} requests queued; retry shortly",
                               status=429, headers={"Retry-After": "1"})
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    async def _models(self, request):
        return json_response(200, self.models())

    async def _health(self, request):
        return json_response(200, {"status": "ok", "in_flight": self.in_flight,
                                    "scorings_dropped": self.batcher.scorings_dropped})

    async def _chat(self, request):
        from starlette.concurrency import run_in_threadpool

        body = await read_json_body(request, self.max_body_bytes)
        conv, sampling = self.read_chat(body)
        created, rid = int(time.time()), f"chatcmpl-{uuid.uuid4().hex[:24]}"
        with self._slot():
            if sampling is None:
                scoring = await run_in_threadpool(self.scoring, conv, body)
                tokens = await _wait(self.batcher.submit_scoring(scoring), request)
                request.state.release = len(tokens) > 1024  # its KV cache and logits went back to the heap
                return json_response(200, self.logprobs_response(tokens, rid, created))
            length = await run_in_threadpool(self.prompt_tokens, conv)
            job = self.batcher.submit(conv, self.fit(sampling, length), length)
            completions = await _wait(job, request)
            return json_response(200, self.chat_response(completions, rid, created))

    async def _embeddings(self, request):
        from starlette.concurrency import run_in_threadpool

        body = await read_json_body(request, self.max_body_bytes)
        with self._slot():
            return json_response(200, await run_in_threadpool(self.embeddings, body))

    async def _tokenize(self, request):
        from starlette.concurrency import run_in_threadpool

        body = await read_json_body(request, self.max_body_bytes)
        with self._slot():
            return json_response(200, await run_in_threadpool(self.tokenize, body))


def _releasing(handler):
    """``handler``, followed by ``release_memory`` (off the event loop) when its body was large."""
    async def endpoint(request):
        from starlette.concurrency import run_in_threadpool

        try:
            return await handler(request)
        finally:
            if getattr(request.state, "body_bytes", 0) > RELEASE_AFTER_BYTES or getattr(request.state, "release", False):
                await run_in_threadpool(release_memory)
    return endpoint


async def _wait(job: Job, request, poll_s: float = 0.2):
    """The job's completions; if the client disconnects first, mark the job gone and give up."""
    waiting = asyncio.wrap_future(job.future)
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=poll_s)
        if done:
            return waiting.result()
        if await request.is_disconnected():
            job.gone.set()
            waiting.add_done_callback(lambda f: f.cancelled() or f.exception())  # nobody reads it
            raise RequestError("the client closed the connection", status=499)


def _error(status: int, message: str, headers: dict[str, str] | None = None):
    """An error in the OpenAI API's form, whose ``type`` clients switch on."""
    kind = {401: "authentication_error", 429: "rate_limit_error"}.get(
        status, "invalid_request_error" if status < 500 else "server_error")
    return json_response(status, {"error": {"message": message, "type": kind, "code": status}}, headers)
