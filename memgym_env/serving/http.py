"""What ``memgym serve-env``'s app needs around its routes: uvicorn on a bound socket, an API-key
guard for HTTP and WebSocket alike, bounded JSON bodies, and JSON errors that name the problem."""

from __future__ import annotations

import hmac
import socket
import threading
import time
from typing import Any

from membuilder.llm.server import RequestError, is_loopback, parse_body
from memgym_env.serving.wire import dumps

OPEN_PATHS = ("/health",)  # what a load balancer probes without the key


def json_response(status: int, payload: Any):
    from starlette.responses import Response

    return Response(dumps(payload), status_code=status, media_type="application/json")


def error_response(status: int, message: str):
    return json_response(status, {"error": {"message": message, "code": status}})


async def read_json(request, max_bytes: int) -> dict:
    """The request body as a JSON object, refused with 413 past ``max_bytes`` and 400 when it is not one."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise RequestError(f"request body over {max_bytes} bytes", status=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise RequestError(f"request body over {max_bytes} bytes", status=413)
        chunks.append(chunk)
    return parse_body(b"".join(chunks))


class KeyGuard:
    """ASGI middleware: every HTTP request and WebSocket but ``OPEN_PATHS`` carries
    ``Authorization: Bearer KEY``. It wraps the whole app, so routes added by OpenEnv are covered too."""

    def __init__(self, app, api_key: str):
        self.app, self.key = app, api_key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"")
        token = given[7:].strip() if given[:7].lower() == b"bearer " else b""
        if hmac.compare_digest(token, self.key):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong API key"})
            return
        response = error_response(401, "missing or wrong API key: send 'Authorization: Bearer KEY'")
        response.headers["WWW-Authenticate"] = "Bearer"
        await response(scope, receive, send)


class HttpServer:
    """An ASGI app under uvicorn on a socket bound at construction (port 0 picks a free one);
    ``start()`` serves from a background thread, ``serve_forever()`` from this one."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 8100, api_key: str | None = None,
                 name: str = "memgym serve-env"):
        if not is_loopback(host) and not api_key:
            raise ValueError(f"binding {host} serves anyone who can reach this machine: set an API key, "
                             "or bind 127.0.0.1")
        self.name = name
        if api_key:
            app = KeyGuard(app, api_key)
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(2048)
        import uvicorn

        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False, timeout_keep_alive=30)
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
