"""``memgym serve``: put a local model behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

import sys
from pathlib import Path

from membuilder.llm.embedders import load_embedder
from membuilder.llm.registry import load_chat_model
from membuilder.llm.server import ModelServer, ServeLimits
from membuilder.plumbing.http import API_KEY_ENV, api_key_or_env, check_binding

HELP = "serve a local chat model and embedder over an OpenAI-compatible HTTP API"
EXAMPLES = """examples:
  memgym serve                                   # SmolLM2-135M + MiniLM on http://127.0.0.1:8000/v1
  memgym serve --model runs/adrpo/checkpoint-200 --port 8100 --served-name memgym-policy
  MEMGYM_API_KEY=s3cret memgym serve --host 0.0.0.0   # beyond loopback a key is required
  memgym serve --host 0.0.0.0 --api-key-file ~/.memgym/key  # the key from a file (first line)

then point any role at it, e.g. --judge openai:smollm2-135m@http://127.0.0.1:8000/v1
(with a key: export it and add api_key_env: MEMGYM_API_KEY to the role's model config)
"""


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="smollm2-135m",
                        help="chat model: a short name, a checkpoint folder or a hub id in the local cache "
                             "(default: smollm2-135m)")
    parser.add_argument("--served-name", default=None,
                        help="model name reported to clients (default: the --model value)")
    parser.add_argument("--embedder", default="minilm", help="embedder spec (default: minilm)")
    parser.add_argument("--no-embedder", action="store_true", help="serve chat only")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, local only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    parser.add_argument("--device", default=None, help="cpu, cuda or auto (default: auto)")
    parser.add_argument("--dtype", default=None, help="auto, float32, bfloat16 or float16 (default: auto)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for the model (default: $MEMGYM_TORCH_THREADS, else torch's own). On "
                             "cores shared with other work, 1 was measured 5x faster than 2 for SmolLM2 (threads "
                             "wait for each other's core at every operation)")
    parser.add_argument("--max-batch", type=int, default=16,
                        help="concurrent requests gathered into one generate call (default: 16)")
    parser.add_argument("--api-key", default=None,
                        help=f"clients must send 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}; "
                             "required when --host is not loopback). A key on the command line is visible "
                             f"to every user of this machine (ps): prefer ${API_KEY_ENV} or --api-key-file")
    parser.add_argument("--api-key-file", default=None,
                        help="read the API key from this file's first line (keep it readable by you alone); "
                             "overrides --api-key and $" + API_KEY_ENV)
    parser.add_argument("--max-queue", type=int, default=256,
                        help="requests waiting or running at once; one more is answered 429 (default: 256)")
    parser.add_argument("--max-tokens", type=int, default=2048,
                        help="completion tokens per request at most; larger max_tokens are lowered (default: 2048)")
    parser.add_argument("--unconstrained-json", action="store_true",
                        help="answer response_format json_object / json_schema requests with unconstrained text "
                             "that the client parses itself (Mem0 and A-Mem writes need this; default: refuse them)")
    parser.add_argument("--header-timeout", type=float, default=10.0,
                        help="seconds a connection has to send complete request headers, from when it opens or "
                             "its last response ends; slower ones get 408 and are closed (default: 10)")
    parser.add_argument("--max-connections", type=int, default=1000,
                        help="open connections at most; one more closes the connection that has waited longest "
                             "for its headers (default: 1000)")
    parser.add_argument("--context-length", type=int, default=None,
                        help="prompt + completion tokens per request (default: the model's own context length)")


def api_key_from(args) -> str | None:
    """The key from --api-key-file, else --api-key, else $MEMGYM_API_KEY, else None."""
    path = getattr(args, "api_key_file", None)
    if path is None:
        return api_key_or_env(args.api_key)
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--api-key-file {path}: cannot read it ({type(exc).__name__}: {exc})") from None
    key = lines[0].strip() if lines else ""
    if not key:
        raise ValueError(f"--api-key-file {path}: the first line is empty; it must hold the key")
    return key


def run(args) -> int:
    if args.max_batch < 1:
        raise ValueError(f"--max-batch must be >= 1, got {args.max_batch}")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {args.port}")
    api_key = api_key_from(args)
    check_binding(args.host, api_key)  # before the model loads, so a refusal comes at once
    limits = ServeLimits(context_length=args.context_length, max_tokens=args.max_tokens, max_queue=args.max_queue,
                         header_timeout_s=args.header_timeout, max_connections=args.max_connections)
    model = load_chat_model(args.model, backend="transformers", device=args.device, dtype=args.dtype,
                            batch_size=args.max_batch, **({"threads": args.threads} if args.threads else {}))
    embedder = None if args.no_embedder else load_embedder(args.embedder)
    server = ModelServer(model, embedder, host=args.host, port=args.port, chat_name=args.served_name or args.model,
                         embedder_name=args.embedder if embedder is not None else None, max_batch=args.max_batch,
                         api_key=api_key, limits=limits, unconstrained_json=args.unconstrained_json)
    print(f"memgym serve: {args.served_name or args.model} at {server.url} "
          f"(embeddings: {args.embedder if embedder is not None else 'off'}; context {server.context_length} tokens, "
          f"max_tokens {limits.max_tokens}, queue {limits.max_queue}; API key {'on' if api_key else 'off'}); "
          "Ctrl-C stops", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.stop()
    return 0
