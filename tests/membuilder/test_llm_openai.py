"""The openai backend against ``memgym serve`` over real HTTP on loopback, plus servers that fail
(500 twice, then fine) or hang, to show retries and timeouts."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest
from llm_models import smollm2  # tests/ is on sys.path under pytest

from membuilder.llm import Sampling, load_chat_model, load_embedder, with_purpose
from membuilder.llm.openai_backend import ModelCallError
from membuilder.llm.server import ModelServer

pytestmark = pytest.mark.slow

SHORT = Sampling(max_new_tokens=8)
# The server batches concurrent requests its own way, so the remote-equals-local checks need a
# batch-invariant model: float32 (see tests/llm_models.py).
EXACT = "float32"
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def server(embedder):
    srv = ModelServer(smollm2(EXACT), embedder, port=0, chat_name="smollm2-135m", embedder_name="minilm").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return load_chat_model(f"openai:smollm2-135m@{server.url}", timeout_s=60, max_retries=1)


def test_models_lists_chat_model_and_embedder(server):
    ids = [m["id"] for m in httpx.get(f"{server.url}/models").json()["data"]]
    assert ids == ["smollm2-135m", "minilm"]


def test_chat_over_http_matches_the_local_model(client):
    (remote,) = client.generate([HELLO], SHORT)
    (local,) = smollm2(EXACT).generate([HELLO], SHORT)
    assert remote.text == local.text
    assert remote.prompt_tokens == local.prompt_tokens and remote.completion_tokens == local.completion_tokens


def test_concurrent_conversations_and_n_keep_conversation_major_order(client):
    convs = [[{"role": "user", "content": f"Repeat the number {i}."}] for i in range(3)]
    out = client.generate(convs, Sampling(max_new_tokens=6, n=2))
    assert len(out) == 6
    assert out[0].text == out[1].text  # greedy: both samples of a conversation agree
    local = smollm2(EXACT).generate(convs, Sampling(max_new_tokens=6))
    assert [out[2 * i].text for i in range(3)] == [c.text for c in local]


def test_usage_is_recorded_per_purpose(client):
    answer = with_purpose(client, "answer")
    answer.generate([HELLO], SHORT)
    booked = client.ledger.to_dict()["by_purpose"]["answer"]
    assert booked["calls"] == 1 and booked["prompt_tokens"] > 0 and booked["completion_tokens"] > 0


def test_json_schema_falls_back_when_the_server_cannot_constrain(server):
    model = load_chat_model(f"openai:smollm2-135m@{server.url}", max_retries=0)
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    (reply,) = model.generate([HELLO], Sampling(max_new_tokens=4, json_schema=schema))
    assert isinstance(reply.text, str) and model.json_mode == "none"


def test_choice_logprobs_over_http_match_local_scores(client):
    conv = [{"role": "user", "content": "What is the capital of France? One word."}]
    remote = client.choice_logprobs(conv, ["Paris", "Banana"])
    local = smollm2(EXACT).choice_logprobs(conv, ["Paris", "Banana"])
    assert remote == pytest.approx(local, abs=1e-3)
    assert remote[0] > remote[1]


def test_count_tokens_uses_the_server_tokenizer(client):
    assert client.count_tokens("hello world") == smollm2(EXACT).count_tokens("hello world")


def test_embeddings_over_http_equal_local_vectors(server, embedder):
    remote = load_embedder(f"openai:minilm@{server.url}")
    texts = ["I moved to Lisbon in May.", "My sister plays the cello."]
    vecs = remote.encode(texts)
    assert vecs.shape == (2, 384) and vecs.dtype == np.float32
    assert np.allclose(vecs, embedder.encode(texts), atol=1e-5)


def test_bad_request_fails_at_once_with_the_server_message(server):
    model = load_chat_model(f"openai:smollm2-135m@{server.url}", max_retries=3)
    with pytest.raises(ModelCallError, match="HTTP 400.*non-empty list of messages"):
        model.http.post("/chat/completions", {"model": "smollm2-135m", "messages": []})
    assert model.http.retries == 0  # a 4xx is not retried
    response = httpx.post(f"{server.url}/chat/completions", json={"messages": [{"role": "robot", "content": "x"}]})
    assert response.status_code == 400 and "unknown role" in response.json()["error"]["message"]


# ---- servers that misbehave ------------------------------------------------------------------
class _Flaky(BaseHTTPRequestHandler):
    """Answers 500 to the first ``failures`` requests, then forwards to the real server."""

    protocol_version = "HTTP/1.1"
    failures = 2
    seen = 0
    upstream = ""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen += 1
        if type(self).seen <= self.failures:
            status, data = 500, b'{"error": {"message": "temporarily broken"}}'
        else:
            reply = httpx.post(self.upstream + self.path.removeprefix("/v1"), content=body,
                               headers={"Content-Type": "application/json"}, timeout=60)
            status, data = reply.status_code, reply.content
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_retries_through_two_server_errors(server):
    handler = type("Flaky", (_Flaky,), {"seen": 0, "upstream": server.url})
    flaky = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=flaky.serve_forever, daemon=True).start()
    try:
        model = load_chat_model(f"openai:smollm2-135m@http://127.0.0.1:{flaky.server_address[1]}/v1",
                                max_retries=3, backoff_s=0.01)
        (reply,) = model.generate([HELLO], SHORT)
        assert reply.text and handler.seen == 3 and model.http.retries == 2
        handler.seen = -10  # now every request fails: the error must surface
        model.http.max_retries = 1
        with pytest.raises(ModelCallError, match="after 2 attempts.*HTTP 500"):
            model.generate([HELLO], SHORT)
    finally:
        flaky.shutdown()
        flaky.server_close()


def test_a_hanging_server_times_out_with_an_error():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never answers
    try:
        model = load_chat_model(f"openai:m@http://127.0.0.1:{listener.getsockname()[1]}/v1",
                                timeout_s=0.3, max_retries=1, backoff_s=0.01)
        started = time.perf_counter()
        with pytest.raises(ModelCallError, match="no answer within 0.3 s"):
            model.generate([HELLO], SHORT)
        assert time.perf_counter() - started < 5
    finally:
        listener.close()


def test_memgym_serve_command_answers_over_http(tmp_path):
    import subprocess
    import sys

    from memgym_env.cli import COMMANDS

    assert COMMANDS.get("serve") == "serve"
    code = ("import argparse, sys; from memgym_env.commands import serve; p = argparse.ArgumentParser(); "
            "serve.add_arguments(p); sys.exit(serve.run(p.parse_args(sys.argv[1:])))")
    proc = subprocess.Popen([sys.executable, "-c", code, "--port", "0", "--no-embedder", "--max-batch", "4"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.time() + 120
        while "memgym serve:" not in line and time.time() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "memgym serve exited early"
        url = line.split(" at ")[1].split()[0]
        reply = httpx.post(f"{url}/chat/completions", timeout=60,
                           json={"model": "smollm2-135m", "messages": HELLO, "max_tokens": 4, "temperature": 0})
        assert reply.status_code == 200
        assert json.loads(reply.text)["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
