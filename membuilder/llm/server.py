"""``memgym serve``: an OpenAI-compatible HTTP server over a local ``ChatModel`` and ``Embedder``.

Lets any tool that speaks the OpenAI API use a local (e.g. freshly trained) checkpoint. Built on
the standard library's ``ThreadingHTTPServer``: no web framework to install.

Endpoints
- ``GET  /v1/models``: the served chat model and embedder.
- ``POST /v1/chat/completions``: ``messages``, ``max_tokens`` (or ``max_completion_tokens``),
  ``temperature`` (default 1, as in the OpenAI API), ``top_p``, ``n``, ``stop``, ``seed``,
  ``min_tokens`` (vLLM's name). Also
  the vLLM extension ``prompt_logprobs`` with ``continue_final_message`` (used by the openai
  backend's ``choice_logprobs``). ``response_format`` with a JSON schema is refused with 400:
  this server cannot constrain decoding, and saying so lets a client fall back knowingly.
  Streaming is not offered.
- ``POST /v1/embeddings``: ``input`` (a string or a list of strings).
- ``POST /tokenize``: ``prompt`` -> ``{"tokens": [...], "count": n}`` (as vLLM).
- ``GET  /health``.

Concurrent chat requests with the same sampling settings are gathered for a few milliseconds
and run as one batched ``generate``: a client sending 16 requests at once gets batched
throughput.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from membuilder.llm.base import Sampling, check_conversations

MAX_BODY_BYTES = 32 * 1024 * 1024


class RequestError(ValueError):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class GenerationBatcher:
    """Runs chat requests in batches: requests with equal sampling settings that arrive within
    ``window_s`` of each other (up to ``max_batch``) share one ``generate`` call."""

    def __init__(self, model: Any, max_batch: int = 16, window_s: float = 0.01):
        self.model, self.max_batch, self.window_s = model, max_batch, window_s
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="memgym-serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, conversation: list[dict], sampling: Sampling) -> Future:
        future: Future = Future()
        self._queue.put((conversation, sampling, future))
        return future

    def _loop(self) -> None:
        held: list = []  # items taken while gathering that belong to another batch
        while True:
            first = held.pop(0) if held else self._queue.get()
            batch, key = [first], _sampling_key(first[1])
            deadline = time.monotonic() + self.window_s
            while len(batch) < self.max_batch:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    break
                (batch if _sampling_key(item[1]) == key else held).append(item)
            self._run(batch)

    def _run(self, batch: list) -> None:
        sampling = batch[0][1]
        try:
            completions = self.model.generate([conv for conv, _, _ in batch], sampling, purpose="serve")
        except Exception as exc:  # the error belongs to the callers, the batcher keeps serving
            for _, _, future in batch:
                future.set_exception(exc)
            return
        for i, (_, _, future) in enumerate(batch):
            future.set_result(completions[i * sampling.n:(i + 1) * sampling.n])


def _sampling_key(s: Sampling) -> str:
    return json.dumps([s.temperature, s.top_p, s.max_new_tokens, s.n, s.stop, s.seed, s.min_new_tokens])


def sampling_from_request(body: dict[str, Any]) -> Sampling:
    """Read OpenAI request fields into a ``Sampling``; a wrong type or range raises ``RequestError``."""
    def number(key, default, kind=float):
        value = body.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RequestError(f"'{key}' must be a number, got {value!r}")
        return kind(value)

    max_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise RequestError("'stop' must be a string or a list of strings")
    sampling = Sampling(
        temperature=number("temperature", 1.0),
        top_p=number("top_p", 1.0),
        max_new_tokens=number(max_key, 256, int),
        n=number("n", 1, int),
        stop=stop or None,
        seed=None if body.get("seed") is None else number("seed", None, int),
        min_new_tokens=number("min_tokens", 0, int),
    )
    if not 1 <= sampling.n <= 64:
        raise RequestError(f"'n' must be between 1 and 64, got {sampling.n}")
    if sampling.max_new_tokens < 1:
        raise RequestError(f"'max_tokens' must be >= 1, got {sampling.max_new_tokens}")
    if not 0 < sampling.top_p <= 1 or sampling.temperature < 0:
        raise RequestError("'top_p' must be in (0, 1] and 'temperature' >= 0")
    return sampling


class ModelServer:
    """The server object: ``start()`` in a background thread or ``serve_forever()`` in this one."""

    def __init__(self, chat_model: Any, embedder: Any = None, host: str = "127.0.0.1", port: int = 8000,
                 chat_name: str | None = None, embedder_name: str | None = None, max_batch: int = 16):
        self.chat_model, self.embedder = chat_model, embedder
        self.chat_name = chat_name or chat_model.name
        self.embedder_name = embedder_name or (embedder.name if embedder is not None else None)
        self.batcher = GenerationBatcher(chat_model, max_batch=max_batch)
        self._embed_lock = threading.Lock()  # one encode at a time: torch threads already use the cores
        handler = type("Handler", (_Handler,), {"app": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ModelServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="memgym-serve", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- endpoint bodies -----------------------------------------------------------------
    def models(self) -> dict:
        names = [self.chat_name] + ([self.embedder_name] if self.embedder is not None else [])
        return {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "memgym"} for n in names]}

    def chat(self, body: dict) -> dict:
        if body.get("stream"):
            raise RequestError("streaming is not offered by memgym serve; send stream=false")
        fmt = body.get("response_format") or {}
        if isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object"):
            raise RequestError(f"response_format '{fmt['type']}' is not supported: memgym serve cannot "
                               "constrain decoding; send the request without response_format")
        try:
            conv = check_conversations([body.get("messages")], "messages")[0]
        except (TypeError, ValueError) as exc:
            raise RequestError(str(exc)) from exc
        created, rid = int(time.time()), f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if body.get("prompt_logprobs") is not None:
            return self._prompt_logprobs(conv, body, rid, created)
        sampling = sampling_from_request(body)
        completions = self.batcher.submit(conv, sampling).result()
        choices = [{"index": i, "message": {"role": "assistant", "content": c.text},
                    "finish_reason": c.finish_reason, "logprobs": None} for i, c in enumerate(completions)]
        prompt_tokens = completions[0].prompt_tokens
        produced = sum(c.completion_tokens for c in completions)
        return {"id": rid, "object": "chat.completion", "created": created, "model": self.chat_name,
                "choices": choices, "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": produced,
                                              "total_tokens": prompt_tokens + produced}}

    def _prompt_logprobs(self, conv: list, body: dict, rid: str, created: int) -> dict:
        score = getattr(self.chat_model, "prompt_logprobs", None)
        if score is None:
            raise RequestError("this model cannot report prompt_logprobs")
        continue_final = bool(body.get("continue_final_message")) and conv[-1]["role"] == "assistant"
        tokens = score(conv, continue_final=continue_final)
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
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise RequestError("'input' must be a string or a list of strings")
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
        tokenizer = getattr(self.chat_model, "tokenizer", None)
        tokens = tokenizer.encode(text, add_special_tokens=False) if tokenizer is not None else []
        return {"tokens": tokens, "count": len(tokens) if tokenizer is not None else self.chat_model.count_tokens(text)}


class _Handler(BaseHTTPRequestHandler):
    app: ModelServer
    protocol_version = "HTTP/1.1"
    server_version = "memgym-serve"

    def log_message(self, fmt, *args):  # quiet: request lines would flood test output
        pass

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        kind = "invalid_request_error" if status < 500 else "server_error"
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self):
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, self.app.models())
        elif self.path.rstrip("/") in ("/health", "/v1/health"):
            self._send(200, {"status": "ok"})
        else:
            self._error(404, f"no such endpoint: GET {self.path}")

    def do_POST(self):
        routes = {"/v1/chat/completions": self.app.chat, "/v1/embeddings": self.app.embeddings,
                  "/tokenize": self.app.tokenize, "/v1/tokenize": self.app.tokenize}
        route = routes.get(self.path.rstrip("/"))
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._error(413, f"request body over {MAX_BODY_BYTES} bytes")
            return
        raw = self.rfile.read(length) if length else b""
        if route is None:
            self._error(404, f"no such endpoint: POST {self.path}")
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise RequestError("the request body must be a JSON object")
            self._send(200, route(body))
        except json.JSONDecodeError as exc:
            self._error(400, f"request body is not JSON: {exc}")
        except RequestError as exc:
            self._error(exc.status, str(exc))
        except Exception as exc:  # a server bug must reach the client as a 500, not a dropped socket
            self._error(500, f"{type(exc).__name__}: {exc}")
