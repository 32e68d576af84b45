"""``memgym world``: generate, show, validate and export structured user worlds."""

from __future__ import annotations

import argparse
import json
import sys
import time

from membuilder.llm import load_chat_model
from memgym_env.world.config import load_config, parse_set_args
from memgym_env.world.data_json import read_world, write_world
from memgym_env.world.llm_generator import LLMWorldGenerator
from memgym_env.world.offline import generate_world
from memgym_env.world.oracle import expert_steps
from memgym_env.world.show import render_user
from memgym_env.world.validate import world_issues

HELP = "Structured user worlds (AMemGym data.json): generate, show, validate, export expert ops."

EXAMPLES = """examples:
  memgym world generate --config configs/env/base.yaml --seed 42 --out world.json
  memgym world generate --config configs/env/extra.yaml --set num_users=3 --out extra.json
  memgym world generate --generator llm --model smollm2-135m --set num_users=1 --set num_periods=1 \\
      --work-dir runs/world-llm --out world-llm.json
  memgym world show world.json --user 0
  memgym world validate world.json
  memgym world expert world.json --user 0 --out expert.jsonl

`generate` is deterministic: the same config and seed give the same file, byte for byte.
`--generator llm` saves each finished user under --work-dir; run it again to resume.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="world_command", metavar="ACTION", required=True)
    g = sub.add_parser("generate", help="generate a world file")
    g.add_argument("--config", default="configs/env/base.yaml", help="YAML settings (default: the base setting)")
    g.add_argument("--seed", type=int, default=None, help="overrides the config's seed")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config field, e.g. num_users=2 or session_qa.per_session=4 (repeatable)")
    g.add_argument("--out", required=True, help="where to write the world (data.json format)")
    g.add_argument("--generator", choices=("offline", "llm"), default="offline")
    g.add_argument("--model", default="smollm2-135m", help="llm generator: a model spec for load_chat_model")
    g.add_argument("--work-dir", default=None, help="llm generator: per-user progress, for resuming")
    g.add_argument("--max-retries", type=int, default=2, help="llm generator: refinement rounds per check")

    s = sub.add_parser("show", help="print one user's timeline: states, events, sessions, questions")
    s.add_argument("path")
    s.add_argument("--user", default="0", help="position in the file or user id (default 0)")
    s.add_argument("--messages", action="store_true", help="also print each session's recorded messages")

    v = sub.add_parser("validate", help="check a world file and list every fault with where it is")
    v.add_argument("path")

    e = sub.add_parser("expert", help="write the oracle expert's agent outputs per session as JSON lines")
    e.add_argument("path")
    e.add_argument("--user", default=None, help="one user (position or id); default all")
    e.add_argument("--out", default="-", help="output file (default stdout)")


def _generate(args) -> int:
    overrides = parse_set_args(args.set)
    if args.seed is not None:
        overrides["seed"] = args.seed
    cfg = load_config(args.config, overrides)
    t0 = time.perf_counter()
    if args.generator == "offline":
        world = generate_world(cfg)
    else:
        model = load_chat_model(args.model)
        gen = LLMWorldGenerator(model, cfg, work_dir=args.work_dir, max_retries=args.max_retries)
        world, report = gen.generate()
        print(report.summary(), file=sys.stderr)
    issues = world_issues(world)
    write_world(world, args.out)
    took = time.perf_counter() - t0
    print(f"wrote {len(world)} users to {args.out} in {took:.1f}s (seed {cfg.seed})")
    if issues:
        print(f"{len(issues)} validation issues:\n" + "\n".join(issues[:20]), file=sys.stderr)
        return 1
    return 0


def _validate(path: str) -> int:
    """Every fault of the file: wrong types and missing fields of every user (a faulty user is
    not checked further), then the consistency checks of the others. An empty world is invalid."""
    faults: list[str] = []
    world = read_world(path, faults=faults)
    issues = faults + world_issues(world)
    if not faults and not len(world):
        issues.append(f"{path}: the world has no users")
    for line in issues:
        print(line)
    sessions = sum(len(p.sessions) for u in world for p in u.periods)
    faulty = " without faults" if faults else ""
    print(f"{path}: {len(world)} users{faulty}, {sessions} sessions, "
          f"{'valid' if not issues else f'{len(issues)} issues'}")
    return 0 if not issues else 1


def run(args) -> int:
    if args.world_command == "generate":
        return _generate(args)
    if args.world_command == "validate":
        return _validate(args.path)
    world = read_world(args.path)
    if args.world_command == "show":
        try:
            user = world.user(args.user)
        except KeyError as exc:
            raise ValueError(f"{args.path}: {exc.args[0]}") from None
        print(render_user(user, messages=args.messages))
        return 0
    users = [world.user(args.user)] if args.user is not None else list(world)
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    try:
        for user in users:
            for step in expert_steps(user):
                out.write(json.dumps({"user": user.id, "session": step.session_id, "time": step.session_time,
                                      "outputs": step.outputs}, ensure_ascii=False) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0
