"""``memgym serve-env``: MemoryGym-v0 over HTTP: the scoring service, and OpenEnv's WebSocket API."""

from __future__ import annotations

import json
import sys

from membuilder.plumbing.http import API_KEY_ENV, HttpServer, api_key_or_env, check_binding
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SESSION_PICKS
from memgym_env.serving.env_app import build_app
from memgym_env.world.user_ranges import parse_users

HELP = "serve MemoryGym-v0: POST /score for remote trainers and, with memgym[openenv], an OpenEnv environment"
EXAMPLES = """examples:
  memgym serve-env --env-config configs/env/construction_cpu.yaml --port 8100
  memgym serve-env --env-config configs/env/construction_cpu.yaml --users 0-7 --max-sessions-per-user 6 --port 8101
  MEMGYM_API_KEY=s3cret memgym serve-env --host 0.0.0.0 --env-config configs/env/construction.yaml

a trainer then scores on it with `scorer: remote` and `scorer_urls: http://HOST:8100,http://HOST:8101`;
an OpenEnv client (TRL, verifiers' openenv taskset) connects to ws://HOST:8100/ws (episodes run over the
WebSocket only: plain-HTTP POST /step answers 409); the scoring counters are at GET /scoring/health
"""


def add_arguments(parser) -> None:
    parser.add_argument("--env-config", default=None,
                        help="MemoryGym-v0 config (YAML of ConstructionConfig fields; default: the built-in defaults)")
    parser.add_argument("--env-overrides", default="{}",
                        help="ConstructionConfig fields over --env-config, as JSON (e.g. '{\"answer_mode\": \"choice\"}')")
    parser.add_argument("--users", default=None,
                        help="users whose sessions /score serves, e.g. '0-7' or '0,2,5' (default: all)")
    parser.add_argument("--max-sessions-per-user", type=int, default=None,
                        help="serve N sessions of each user, chosen by --session-pick (default: all)")
    parser.add_argument("--session-pick", choices=SESSION_PICKS, default="first",
                        help="which --max-sessions-per-user sessions /score serves: 'first' (a user's first N, "
                             "which start from an empty memory) or 'every_period' (N drawn round-robin over the "
                             "world's periods, each period's earliest first); match the trainer's session_pick "
                             "(default: first)")
    parser.add_argument("--openenv", choices=("auto", "on", "off"), default="auto",
                        help="also serve the OpenEnv environment (reset/step over WebSocket at /ws): on needs "
                             "memgym[openenv]; auto serves it when openenv-core is installed (default: auto)")
    parser.add_argument("--max-sessions", type=int, default=8,
                        help="OpenEnv: concurrent WebSocket sessions (default: 8)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of this process (default: torch's choice; 1 for replicas sharing a machine)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, local only)")
    parser.add_argument("--port", type=int, default=8100, help="port (default: 8100; 0 picks a free one)")
    parser.add_argument("--api-key", default=None,
                        help=f"clients must send 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}; required "
                             "when --host is not loopback)")


def run(args) -> int:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {args.port}")
    try:
        overrides = json.loads(args.env_overrides)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--env-overrides is not JSON: {exc}") from None
    if not isinstance(overrides, dict):
        raise ValueError(f"--env-overrides must be a JSON object of ConstructionConfig fields, got {overrides!r}")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    api_key = api_key_or_env(args.api_key)
    check_binding(args.host, api_key)  # before the world and the models load, so a refusal comes at once
    config = ConstructionConfig.from_yaml(args.env_config, **overrides)
    app, served = build_app(config, users=None if args.users is None else parse_users(args.users, what="--users"), max_sessions_per_user=args.max_sessions_per_user,
                            openenv=args.openenv, max_concurrent_envs=args.max_sessions,
                            session_pick=args.session_pick)
    server = HttpServer(app, host=args.host, port=args.port, api_key=api_key, name="memgym serve-env")
    print(f"memgym serve-env: {served} at {server.url} (API key {'on' if api_key else 'off'}); Ctrl-C stops",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.stop()
    return 0
