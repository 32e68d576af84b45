"""What keeps slow or idle clients from holding an HTTP server built on ``membuilder.plumbing.http``.

uvicorn alone lets a connection sit forever before its first request (its keep-alive timer starts
only after a response), lets headers arrive a byte a minute, and counts such connections toward
``limit_concurrency``: about 600 sockets dribbling headers made every other client get 503. Here:

- ``guarded_h11``: uvicorn's h11 protocol with a deadline for each request's headers (from the
  connection's start or the previous response; a connection that has not sent complete headers
  by then gets 408 and is closed, however many bytes it trickles) and one for its body; past
  ``max_connections`` open connections, a new one evicts the connection that has waited longest
  for its headers (a real client sends its headers in milliseconds, so only slow ones are lost).
- ``RequestCap``: the concurrency limit counts requests being answered, not open connections:
  past ``limit`` the server answers 503 with ``Retry-After``.
- ``release_memory``: after a large request, garbage is collected and glibc's ``malloc_trim``
  hands freed heap pages back to the system (CPython keeps freed arenas otherwise, so the resident
  size stays at its peak).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import time

REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"


def guarded_h11(header_timeout_s: float, body_timeout_s: float, max_connections: int | None):
    """A uvicorn h11 protocol class with header and body deadlines and a connection cap."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(H11Protocol):
        def connection_made(self, transport) -> None:
            self._timer, self._waiting_since = None, None
            super().connection_made(transport)
            self._await_headers()
            if max_connections is not None and len(self.connections) > max_connections:
                _evict_slowest(self.connections)

        def connection_lost(self, exc) -> None:
            self._cancel()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self not in self.connections:  # upgraded to a WebSocket: its own protocol has the transport
                self._cancel()
                self._waiting_since = None
            elif self.cycle is not cycle and not self.transport.is_closing():  # a request's headers came
                self._waiting_since = None
                self._arm(body_timeout_s, self.cycle, self._body_expired)

        def on_response_complete(self) -> None:
            self._await_headers()  # the next request on this connection has its own deadline
            super().on_response_complete()

        def _await_headers(self) -> None:
            self._waiting_since = time.monotonic()
            self._arm(header_timeout_s, self.cycle, self._headers_expired)

        def _arm(self, seconds: float, cycle, expire) -> None:
            self._cancel()
            self._timer = self.loop.call_later(seconds, expire, cycle)

        def _cancel(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _headers_expired(self, cycle) -> None:
            if self.cycle is cycle and not self.transport.is_closing():
                message = b'{"error": {"message": "request headers not received in time", "code": 408}}'
                self.transport.write(REQUEST_TIMEOUT + b"Content-Length: %d\r\n\r\n" % len(message) + message)
                self.transport.close()

        def _body_expired(self, cycle) -> None:
            # The app sees the disconnect (its body read ends), so a handler never waits on it.
            if self.cycle is cycle and cycle.more_body and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11


def _evict_slowest(connections) -> None:
    """Close the connection that has waited longest for its request headers."""
    waiting = [c for c in connections if getattr(c, "_waiting_since", None) is not None
               and not c.transport.is_closing()]
    if waiting:
        min(waiting, key=lambda c: c._waiting_since).transport.close()


class RequestCap:
    """ASGI middleware: at most ``limit`` HTTP requests answered at once; one more gets 503."""

    def __init__(self, app, limit: int, error):
        self.app, self.limit, self.error, self.active = app, limit, error, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.active >= self.limit:
            response = self.error(503, f"server overloaded: {self.active} requests in progress; retry shortly",
                                  {"Retry-After": "1"})
            return await response(scope, receive, send)
        self.active += 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.active -= 1


def _libc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): the collector alone
        return None


_MALLOC_TRIM = _libc_trim()


def release_memory() -> None:
    """Collect garbage and give freed heap pages back to the system (glibc ``malloc_trim``)."""
    gc.collect()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
