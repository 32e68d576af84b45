"""``memgym serve``: put a local model behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

from membuilder.llm.embedders import load_embedder
from membuilder.llm.registry import load_chat_model
from membuilder.llm.server import ModelServer

HELP = "serve a local chat model and embedder over an OpenAI-compatible HTTP API"
EXAMPLES = """examples:
  memgym serve                                   # SmolLM2-135M + MiniLM on http://127.0.0.1:8000/v1
  memgym serve --model runs/adrpo/checkpoint-200 --port 8100 --served-name memgym-policy
  memgym serve --model smollm2-135m --no-embedder --host 0.0.0.0

then point any role at it, e.g. --judge openai:smollm2-135m@http://127.0.0.1:8000/v1
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
    parser.add_argument("--max-batch", type=int, default=16,
                        help="concurrent requests gathered into one generate call (default: 16)")


def run(args) -> int:
    import sys

    if args.max_batch < 1:
        raise ValueError(f"--max-batch must be >= 1, got {args.max_batch}")
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {args.port}")
    model = load_chat_model(args.model, backend="transformers", device=args.device, dtype=args.dtype,
                            batch_size=args.max_batch)
    embedder = None if args.no_embedder else load_embedder(args.embedder)
    server = ModelServer(model, embedder, host=args.host, port=args.port, chat_name=args.served_name or args.model,
                         embedder_name=args.embedder if embedder is not None else None, max_batch=args.max_batch)
    print(f"memgym serve: {args.served_name or args.model} at {server.url} "
          f"(embeddings: {args.embedder if embedder is not None else 'off'}); Ctrl-C stops", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.stop()
    return 0
