"""``memgym serve`` under load, bad input and impatient clients: real HTTP on loopback against a
tiny random Llama (a real transformers model; it generates about 500 tokens a second here)."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from membuilder.llm.server import ModelServer, ServeLimits

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tiny_model():
    from membuilder.llm.transformers_backend import TransformersChatModel
    from membuilder.training.tiny import byte_tokenizer, tiny_llama

    tok = byte_tokenizer()
    return TransformersChatModel(model=tiny_llama(tok), tokenizer=tok, name="tiny", threads=1)


@pytest.fixture
def serve(tiny_model):
    servers = []

    def start(**kwargs) -> ModelServer:
        servers.append(ModelServer(tiny_model, port=0, chat_name="tiny", **kwargs).start())
        return servers[-1]

    yield start
    for srv in servers:
        srv.stop()


def chat(url: str, timeout: float = 60, headers: dict | None = None, **body) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json={"messages": HELLO, "max_tokens": 2, **body},
                      headers=headers, timeout=timeout)


def raw_request(url: str, head: bytes, body: bytes = b"") -> bytes:
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(head + b"\r\n\r\n" + body)
        return conn.recv(4096)


def test_a_hundred_simultaneous_requests_all_get_answers_while_a_long_one_runs(serve):
    url = serve().url
    gate = threading.Barrier(100)

    def one(i):
        gate.wait()
        with httpx.Client(timeout=120) as client:  # a connection of its own, as separate clients would
            return client.post(f"{url}/chat/completions", json={"messages": HELLO, "max_tokens": 2, "seed": i}).status_code

    with ThreadPoolExecutor(101) as pool:
        long = pool.submit(chat, url, max_tokens=2000, min_tokens=2000)
        time.sleep(0.5)
        statuses = list(pool.map(one, range(100)))
    assert statuses == [200] * 100  # no reset, no refusal: the queue holds 256
    assert long.result().status_code == 200


def test_a_full_queue_answers_429_with_retry_after(serve):
    srv = serve(limits=ServeLimits(max_queue=1, max_tokens=4000))
    with ThreadPoolExecutor(1) as pool:
        long = pool.submit(chat, srv.url, max_tokens=2000, min_tokens=2000)
        deadline = time.time() + 30
        while httpx.get(f"{srv.url}/health").json()["in_flight"] < 1 and time.time() < deadline:
            time.sleep(0.02)
        busy = chat(srv.url)
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
        assert long.result().status_code == 200
    assert chat(srv.url).status_code == 200


def test_a_prompt_longer_than_the_context_gets_400_at_once(serve):
    url = serve().url
    started = time.perf_counter()
    reply = httpx.post(f"{url}/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": "x" * 1_000_000}], "max_tokens": 4})
    assert reply.status_code == 400 and "context is 8192 tokens" in reply.json()["error"]["message"]
    assert time.perf_counter() - started < 20


@pytest.mark.parametrize("max_tokens", [1e30, -5, 0, 2.5, "8", None, 10**400])
def test_bad_max_tokens_gets_400(serve, max_tokens):
    url = serve().url
    body = {"messages": HELLO, "max_tokens": max_tokens}
    if max_tokens is None:
        body = {"messages": HELLO, "max_tokens": 2, "temperature": "hot"}
    reply = httpx.post(f"{url}/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400, reply.text


def test_max_tokens_is_lowered_to_what_the_context_leaves(serve):
    url = serve(limits=ServeLimits(context_length=110)).url
    reply = chat(url, max_tokens=100, min_tokens=100).json()
    usage = reply["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= 110
    assert reply["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("body", [b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": Infinity}',
                                  b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": NaN}',
                                  b"\xff\xfe{}", b"[" * 100_000, b"{not json", b"[1, 2]",
                                  b'{"messages": "hi"}', b'{"messages": [{"role": 5, "content": "x"}]}'])
def test_malformed_bodies_get_400(serve, body):
    url = serve().url
    reply = httpx.post(f"{url}/chat/completions", content=body, timeout=60)
    assert reply.status_code == 400 and reply.json()["error"]["message"]


@pytest.mark.parametrize("length", [b"abc", b"-5", b"1e3"])
def test_a_malformed_content_length_gets_400(serve, length):
    url = serve().url
    answer = raw_request(url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + length, b"{}")
    assert answer.startswith(b"HTTP/1.1 400")


def test_an_oversized_body_gets_413(serve):
    url = serve(limits=ServeLimits(max_body_bytes=1000)).url
    reply = httpx.post(f"{url}/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": "x" * 2000}]})
    assert reply.status_code == 413


def test_a_client_that_leaves_cancels_its_generation(serve):
    srv = serve(limits=ServeLimits(max_tokens=8000))
    with pytest.raises(httpx.ReadTimeout):  # about 20 s of generation if it ran to the end
        chat(srv.url, timeout=1.0, max_tokens=8000, min_tokens=8000)
    started = time.perf_counter()
    assert chat(srv.url).status_code == 200
    assert time.perf_counter() - started < 5
    assert httpx.get(f"{srv.url}/health").json()["in_flight"] == 0


def test_the_api_key_is_required_when_set(serve):
    url = serve(api_key="s3cret").url
    assert chat(url).status_code == 401
    assert chat(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{url}/models").status_code == 401
    assert chat(url, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert httpx.get(f"{url}/health").status_code == 200


def test_the_openai_backend_sends_the_key_from_its_environment_variable(serve, monkeypatch):
    from membuilder.llm import Sampling, load_chat_model

    url = serve(api_key="s3cret").url
    monkeypatch.setenv("MEMGYM_API_KEY", "s3cret")
    client = load_chat_model({"backend": "openai", "model": "tiny", "base_url": url, "api_key_env": "MEMGYM_API_KEY"},
                             max_retries=0)
    (reply,) = client.generate([HELLO], Sampling(max_new_tokens=2))
    assert reply.completion_tokens == 2


def test_binding_beyond_loopback_needs_a_key(tiny_model):
    with pytest.raises(ValueError, match="API key"):
        ModelServer(tiny_model, host="0.0.0.0", port=0)


def test_unknown_routes_and_methods_answer_json(serve):
    url = serve().url
    assert httpx.get(f"{url}/nope").json()["error"]["code"] == 404
    assert httpx.get(f"{url}/chat/completions").status_code == 405
