"""The HTTP stack of ``memgym serve`` (the OpenAI-compatible model server) and ``memgym serve-env``
(MemoryGym-v0's scoring service and OpenEnv app): Starlette routes under uvicorn on a socket.

- ``HttpServer``: binds its socket at construction (port 0 picks a free one), refuses an address
  beyond loopback without an API key, and serves from a background thread (``start``) or this
  one (``serve_forever``) until ``stop``. ``ServerSettings`` holds every uvicorn setting, and the
  guards against slow and idle clients (``http_guard``): a header deadline, a body deadline, a cap
  on open connections that evicts the slowest, and a limit on requests (not connections) at once.
- ``KeyGuard``: with a key, every HTTP request and WebSocket but the open paths carries
  ``Authorization: Bearer KEY`` (or ``X-Api-Key: KEY``), compared in constant time; it wraps the
  whole app, so routes a library adds (OpenEnv's) are covered too.
- ``read_json_body``: a request body as a JSON object, 413 past a size, 400 saying why it is not one.
- ``guarded`` and ``json_app``: a ``RequestError`` becomes a JSON error with its status, a server
  bug a 500 naming its type (never a dropped socket), an unknown route or method a JSON 404/405.

Starlette and uvicorn are imported where they are used: importing this module stays cheap.
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from membuilder.plumbing.http_guard import RequestCap, guarded_h11

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
API_KEY_ENV = "MEMGYM_API_KEY"  # where servers and their clients read the key when none is given


class RequestError(ValueError):
    """What a request did wrong, answered as a JSON error with ``status`` (and ``headers``)."""

    def __init__(self, message: str, status: int = 400, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


# ---- who may call ------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def api_key_or_env(given: str | None) -> str | None:
    """The key given, else ``$MEMGYM_API_KEY``, else None (no key)."""
    return given or os.environ.get(API_KEY_ENV) or None


def check_binding(host: str, api_key: str | None) -> None:
    """A server bound beyond loopback without a key would serve anyone who reaches the machine."""
    if not is_loopback(host) and not api_key:
        raise ValueError(f"binding {host} serves anyone who can reach this machine: set an API key "
                         f"(--api-key or ${API_KEY_ENV}), or bind 127.0.0.1")


def key_matches(headers: Sequence[tuple[bytes, bytes]], api_key: str) -> bool:
    """Whether an ASGI scope's headers carry ``api_key``; the comparison takes the same time
    whatever the guess, so the key cannot be found one byte at a time."""
    by_name = dict(headers)  # ASGI header names are lower-case bytes
    given = by_name.get(b"authorization", b"")
    token = given[7:].strip() if given[:7].lower() == b"bearer " else by_name.get(b"x-api-key", b"")
    return hmac.compare_digest(token, api_key.encode())


# ---- requests and answers ----------------------------------------------------------------
def _reject_constant(name: str):
    raise RequestError(f"request body is not valid JSON: {name} is not a JSON number")


def parse_body(raw: bytes) -> dict:
    """A request body as a JSON object, or ``RequestError`` (400) saying why not."""
    try:
        text = raw.decode("utf-8") if raw else "{}"
    except UnicodeDecodeError as exc:
        raise RequestError(f"request body is not UTF-8 text: byte {exc.start} is invalid") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise RequestError(f"request body is not JSON: {exc}") from None
    except RecursionError:
        raise RequestError("request body is not JSON this server reads: nested too deeply") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


async def read_json_body(request, max_bytes: int) -> dict:
    """The request body as a JSON object, refused with 413 past ``max_bytes`` (declared or sent)
    and 400 when it is not one. The bytes read are left in ``request.state.body_bytes`` (a server
    can release memory after large ones)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise RequestError(f"request body over {max_bytes} bytes", status=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        request.state.body_bytes = size
        if size > max_bytes:
            raise RequestError(f"request body over {max_bytes} bytes", status=413)
        chunks.append(chunk)
    return parse_body(b"".join(chunks))


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None,
                  encode: Callable[[Any], str] = json.dumps):
    from starlette.responses import Response

    return Response(encode(payload), status_code=status, headers=headers, media_type="application/json")


def error_response(status: int, message: str, headers: dict[str, str] | None = None):
    """``{"error": {"message": ..., "code": status}}``; a server with another error body (the
    OpenAI one) passes its own function of the same signature wherever ``error`` is taken."""
    return json_response(status, {"error": {"message": message, "code": status}}, headers)


def guarded(handler, error=error_response):
    """An endpoint that answers ``handler``'s ``RequestError`` with its status and a server bug with
    a 500 naming the exception: the client always gets JSON, never a dropped socket."""
    async def endpoint(request):
        try:
            return await handler(request)
        except RequestError as exc:
            return error(exc.status, str(exc), exc.headers)
        except Exception as exc:
            return error(500, f"{type(exc).__name__}: {exc}")
    return endpoint


def json_app(routes: list, error=error_response):
    """A Starlette app over ``routes`` whose unknown routes and methods get JSON 404/405."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException

    async def http_error(request, exc):
        if exc.status_code in (404, 405):
            return error(exc.status_code, f"no such endpoint: {request.method} {request.url.path}")
        return error(exc.status_code, str(exc.detail))

    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


class KeyGuard:
    """ASGI middleware: every HTTP request and WebSocket but ``open_paths`` (what a load balancer
    probes) carries the key; else 401 (``WWW-Authenticate: Bearer``) or WebSocket close 1008."""

    def __init__(self, app, api_key: str, open_paths: Sequence[str] = ("/health",),
                 error=error_response):
        self.app, self.key, self.open_paths, self.error = app, api_key, tuple(open_paths), error

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or scope.get("path") in self.open_paths \
                or key_matches(scope.get("headers") or [], self.key):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong API key"})
            return
        response = self.error(401, "missing or wrong API key: send 'Authorization: Bearer KEY'",
                              {"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


# ---- the server --------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerSettings:
    """How uvicorn runs one server: every uvicorn setting the project uses is set here."""

    protocol: str = "auto"  # uvicorn's HTTP parser: "h11", "httptools", or "auto" (httptools when installed)
    keep_alive_s: int = 30  # an idle keep-alive connection is closed after this many seconds
    max_concurrency: int | None = None  # requests answered at once; 503 beyond (None: no cap). Idle
    # and half-sent connections do not count: they are bounded by the deadlines and max_connections.
    backlog: int = 2048  # connections the kernel queues before they are accepted
    # With a header deadline the h11 parser is used, guarded (``http_guard.guarded_h11``): request
    # headers must be complete this many seconds after the connection opens or the last response
    # ends (else 408 and close), a body within body_timeout_s of its headers; past max_connections
    # open connections a new one closes the one that has waited longest for its headers.
    header_timeout_s: float | None = None
    body_timeout_s: float = 60.0
    max_connections: int | None = None

    def __post_init__(self):
        for name in ("header_timeout_s", "body_timeout_s", "max_connections", "max_concurrency"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"ServerSettings.{name} must be > 0, got {value}")


class HttpServer:
    """An ASGI app under uvicorn on a socket bound at construction (port 0 picks a free one);
    ``start()`` serves from a background thread, ``serve_forever()`` from this one (Ctrl-C or
    SIGTERM ends it). With ``api_key`` the app is wrapped in ``KeyGuard``; beyond loopback a key
    is required."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None, *,
                 name: str = "memgym http", settings: ServerSettings | None = None,
                 open_paths: Sequence[str] = ("/health",), error=error_response):
        check_binding(host, api_key)
        self.name, self.settings = name, settings or ServerSettings()
        if api_key:
            app = KeyGuard(app, api_key, open_paths, error)
        if self.settings.max_concurrency is not None:  # outermost: a flood is refused before the key check
            app = RequestCap(app, self.settings.max_concurrency, error)
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(self.settings.backlog)
        import uvicorn

        settings = self.settings
        protocol = settings.protocol
        if settings.header_timeout_s is not None:
            protocol = guarded_h11(settings.header_timeout_s, settings.body_timeout_s, settings.max_connections)
        config = uvicorn.Config(app, http=protocol, lifespan="off", log_level="warning", access_log=False,
                                timeout_keep_alive=settings.keep_alive_s)
        self.uvicorn = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def start(self) -> HttpServer:
        self._thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [self.sock]}, name=self.name,
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        self.uvicorn.run(sockets=[self.sock])

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()
