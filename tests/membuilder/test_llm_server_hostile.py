"""``memgym serve`` against hostile clients: slow and idle connections, oversized prompts, long
``prompt_logprobs`` requests, unknown models. Real sockets against a real server on loopback,
the tiny random Llama of ``test_llm_server_limits``."""

from __future__ import annotations

import argparse
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import test_llm_server_limits as limits  # its tiny model and server fixtures

from membuilder.llm.prompt_scoring import PromptScoring
from membuilder.llm.server import ServeLimits
from memgym_env.commands.serve import api_key_from

tiny_model, serve, chat = limits.tiny_model, limits.serve, limits.chat
GUARDED = dict(header_timeout_s=1.0, body_timeout_s=1.0, keep_alive_s=1)


def address(url: str) -> tuple[str, int]:
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    return host, int(port)


def closed_within(conn: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed ``conn`` within ``seconds``, and what it sent before."""
    conn.settimeout(0.2)
    deadline, got = time.monotonic() + seconds, b""
    while time.monotonic() < deadline:
        try:
            data = conn.recv(4096)
        except TimeoutError:
            continue
        except ConnectionError:
            return True, got
        if not data:
            return True, got
        got += data
    return False, got


def test_slow_header_clients_are_cut_off_and_do_not_starve_others(serve):
    # max_queue 1 puts the request limit at 66: eighty slow and idle sockets filled uvicorn's
    # connection-counting limit (every other client got 503); requests, not connections, count now.
    srv = serve(limits=ServeLimits(max_queue=1, **GUARDED))
    host, port = address(srv.url)
    stop = threading.Event()
    slow = [socket.create_connection((host, port)) for _ in range(40)]
    idle = [socket.create_connection((host, port)) for _ in range(40)]

    def dribble():  # a header a byte every 50 ms: never complete within the deadline
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1000
        for i in range(len(head)):
            for conn in slow:
                try:
                    conn.send(head[i:i + 1])
                except OSError:
                    pass
            if stop.wait(0.05):
                return

    thread = threading.Thread(target=dribble, daemon=True)
    thread.start()
    try:
        started = time.perf_counter()
        statuses = [chat(srv.url, timeout=30).status_code for _ in range(5)]
        assert statuses == [200] * 5 and time.perf_counter() - started < 15
        for conn in slow + idle:  # 1 s deadline: all cut well within 5 s, slow ones with a 408
            closed, sent = closed_within(conn, 5)
            assert closed
            assert sent == b"" or sent.startswith(b"HTTP/1.1 408")
    finally:
        stop.set()
        thread.join()
        for conn in slow + idle:
            conn.close()


def test_past_max_connections_the_longest_waiting_connection_is_evicted(serve):
    srv = serve(limits=ServeLimits(max_connections=20, header_timeout_s=30))
    host, port = address(srv.url)
    idle = [socket.create_connection((host, port)) for _ in range(30)]
    time.sleep(0.5)
    try:
        assert chat(srv.url, timeout=30).status_code == 200  # its connection evicted one more
        closed = [closed_within(conn, 0.5)[0] for conn in idle]
        assert sum(closed) >= 10 and all(closed[:10])  # the oldest went first
        assert not any(closed[-5:])
    finally:
        for conn in idle:
            conn.close()


def test_idle_keep_alive_and_half_sent_bodies_are_closed(serve):
    srv = serve(limits=ServeLimits(**GUARDED))
    host, port = address(srv.url)
    with socket.create_connection((host, port)) as conn:  # a whole request, then silence
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(4096).startswith(b"HTTP/1.1 200")
        closed, _ = closed_within(conn, 4)
        assert closed
    with socket.create_connection((host, port)) as conn:  # a body that never finishes
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mess")
        closed, _ = closed_within(conn, 4)
        assert closed
    assert httpx.get(f"{srv.url}/health").json()["in_flight"] == 0


def test_a_huge_prompt_is_refused_by_its_size_before_tokenizing(serve):
    srv = serve()
    assert srv.max_body_bytes < 4 * 2**20  # matched to the context, not 32 MB
    started = time.perf_counter()
    huge = httpx.post(f"{srv.url}/chat/completions", timeout=60,
                      json={"messages": [{"role": "user", "content": "x" * 20_000_000}], "max_tokens": 2})
    assert huge.status_code == 413 and time.perf_counter() - started < 5
    too_long = "x" * (srv.max_prompt_chars + 1)
    started = time.perf_counter()
    reply = httpx.post(f"{srv.url}/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": too_long}], "max_tokens": 2})
    assert reply.status_code == 400 and "characters" in reply.json()["error"]["message"]
    assert time.perf_counter() - started < 5
    for path, body in (("/tokenize", {"prompt": too_long}),):
        assert httpx.post(f"{srv.url}{path}", json=body, timeout=60).status_code == 400
    assert chat(srv.url).status_code == 200


def test_an_unknown_model_gets_404_and_the_served_one_200(serve):
    url = serve().url
    reply = chat(url, model="gpt-4o")
    assert reply.status_code == 404 and "gpt-4o" in reply.json()["error"]["message"]
    assert chat(url, model="tiny").status_code == 200
    assert chat(url).status_code == 200  # no model named: the served one


def test_chunked_prompt_logprobs_match_one_whole_pass(tiny_model):
    conv = [{"role": "user", "content": "hello there " * 10}, {"role": "assistant", "content": "fine"}]
    whole = tiny_model.prompt_logprobs(conv, continue_final=True)
    scoring = PromptScoring(tiny_model, tiny_model.render(conv, continue_final=True), first_chunk=5, min_chunk=5, max_chunk=9)
    while not scoring.step():
        pass
    got = scoring.result()
    assert scoring.chunks_run > 10 and [t[:2] for t in got] == [t[:2] for t in whole]
    assert got[0][2] is None and max(abs(a[2] - b[2]) for a, b in zip(got[1:], whole[1:], strict=True)) < 1e-4


def long_scoring(url: str, timeout: float = 120) -> httpx.Response:
    conv = [{"role": "user", "content": "x" * 8000}, {"role": "assistant", "content": "y"}]
    return httpx.post(f"{url}/chat/completions", timeout=timeout, json={
        "messages": conv, "max_tokens": 1, "prompt_logprobs": 0, "continue_final_message": True})


def test_a_short_chat_is_answered_while_a_long_prompt_logprobs_runs(serve):
    url = serve().url
    done: dict[str, float] = {}
    with ThreadPoolExecutor(2) as pool:
        started = time.perf_counter()
        scoring = pool.submit(lambda: (long_scoring(url), done.setdefault("scoring", time.perf_counter())))
        time.sleep(0.3)
        assert chat(url).status_code == 200
        done["chat"] = time.perf_counter()
        reply = scoring.result()[0]
    assert reply.status_code == 200 and len(reply.json()["prompt_logprobs"]) > 8000
    assert done["chat"] < done["scoring"], (done["chat"] - started, done["scoring"] - started)


def test_a_client_leaving_stops_its_prompt_logprobs(serve):
    srv = serve()
    with pytest.raises(httpx.ReadTimeout):
        long_scoring(srv.url, timeout=0.3)
    deadline = time.monotonic() + 3
    while srv.batcher.scorings_dropped < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.batcher.scorings_dropped == 1
    assert httpx.get(f"{srv.url}/health").json()["in_flight"] == 0


def test_the_api_key_comes_from_a_file_or_the_environment(tmp_path, monkeypatch):
    args = argparse.Namespace(api_key=None, api_key_file=None)
    monkeypatch.delenv("MEMGYM_API_KEY", raising=False)
    assert api_key_from(args) is None
    monkeypatch.setenv("MEMGYM_API_KEY", "from-env")
    assert api_key_from(args) == "from-env"
    key = tmp_path / "key"
    key.write_text("from-file\n", encoding="utf-8")
    assert api_key_from(argparse.Namespace(api_key="flag", api_key_file=str(key))) == "from-file"
    key.write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="first line is empty"):
        api_key_from(argparse.Namespace(api_key=None, api_key_file=str(key)))
    with pytest.raises(ValueError, match="cannot read"):
        api_key_from(argparse.Namespace(api_key=None, api_key_file=str(tmp_path / "missing")))
