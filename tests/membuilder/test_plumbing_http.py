"""membuilder.plumbing.http, the stack under ``memgym serve`` and ``memgym serve-env``: a small
Starlette app served on loopback, called over real HTTP and WebSocket."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import websockets
from starlette.routing import Route, WebSocketRoute

from membuilder.plumbing.http import (
    HttpServer,
    RequestError,
    guarded,
    json_app,
    json_response,
    read_json_body,
)


async def echo(request):
    return json_response(200, await read_json_body(request, max_bytes=100))


async def teapot(request):
    raise RequestError("no coffee here", status=418)


async def broken(request):
    return {}["missing"]


async def health(request):
    return json_response(200, {"status": "ok"})


async def hello(websocket):
    await websocket.accept()
    await websocket.send_text("hello")
    await websocket.close()


def app():
    return json_app([Route("/echo", guarded(echo), methods=["POST"]), Route("/teapot", guarded(teapot)),
                     Route("/broken", guarded(broken)), Route("/health", guarded(health)),
                     WebSocketRoute("/ws", hello)])


@pytest.fixture
def server():
    srv = HttpServer(app(), port=0).start()
    yield srv
    srv.stop()


@pytest.fixture
def keyed():
    srv = HttpServer(app(), port=0, api_key="s3cret").start()
    yield srv
    srv.stop()


def first_message(url: str, headers: dict[str, str] | None = None) -> str:
    async def talk():
        async with websockets.connect(url.replace("http://", "ws://") + "/ws", additional_headers=headers) as ws:
            return await ws.recv()
    return asyncio.run(talk())


def test_a_json_body_is_read_and_answered(server):
    assert httpx.post(f"{server.url}/echo", json={"a": 1}).json() == {"a": 1}


@pytest.mark.parametrize("body, message", [(b"{oops", "not JSON"), (b"[1]", "JSON object"),
                                           (b'{"a": NaN}', "NaN"), (b"\xff", "UTF-8")])
def test_a_body_that_is_not_a_json_object_gets_400_saying_why(server, body, message):
    reply = httpx.post(f"{server.url}/echo", content=body)
    assert reply.status_code == 400 and message in reply.json()["error"]["message"]


def test_a_body_over_the_limit_gets_413(server):
    assert httpx.post(f"{server.url}/echo", json={"a": "x" * 200}).status_code == 413


def test_errors_are_json_with_their_status(server):
    assert httpx.get(f"{server.url}/teapot").json() == {"error": {"message": "no coffee here", "code": 418}}
    bug = httpx.get(f"{server.url}/broken")
    assert bug.status_code == 500 and bug.json()["error"]["message"] == "KeyError: 'missing'"
    assert httpx.get(f"{server.url}/nowhere").json()["error"] == {"message": "no such endpoint: GET /nowhere",
                                                                  "code": 404}
    assert httpx.get(f"{server.url}/echo").status_code == 405


def test_with_a_key_every_path_but_health_needs_it(keyed):
    refused = httpx.post(f"{keyed.url}/echo", json={})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert httpx.post(f"{keyed.url}/echo", json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.post(f"{keyed.url}/echo", json={}, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert httpx.post(f"{keyed.url}/echo", json={}, headers={"X-Api-Key": "s3cret"}).status_code == 200
    assert httpx.get(f"{keyed.url}/health").status_code == 200


def test_with_a_key_a_websocket_without_it_is_closed(keyed):
    assert first_message(keyed.url, {"Authorization": "Bearer s3cret"}) == "hello"
    with pytest.raises(websockets.exceptions.WebSocketException):
        first_message(keyed.url)


def test_binding_beyond_loopback_needs_a_key():
    with pytest.raises(ValueError, match="API key"):
        HttpServer(app(), host="0.0.0.0", port=0)


def test_stop_closes_the_socket(server):
    server.stop()
    assert server.sock.fileno() == -1
