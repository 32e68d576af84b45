"""The ``memgym`` command.

Each subcommand lives in its own module under ``memgym_env.commands`` and is imported only when
it runs, so ``memgym --help`` stays instant. A command module defines ``HELP`` (one line),
``EXAMPLES`` (text shown under ``--help``), ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> module under memgym_env.commands; one line each, in the order `memgym --help` lists them.
COMMANDS: dict[str, str] = {
    "demo": "demo",
    "eval": "eval",
    "evaluate": "evaluate",
    "report": "report",
    "rollout": "rollout",
    "serve": "serve",
    "serve-env": "serve_env",
    "world": "world",
}


def _load(name: str):
    return importlib.import_module(f"memgym_env.commands.{COMMANDS[name]}")


class _Parser(argparse.ArgumentParser):
    """Wrong arguments get one line that says what was wrong and where to look, not a usage dump."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(load_all: bool = True) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memgym",
        description="MemGym: train and evaluate the long-term memory of LLM assistants.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _load(name)
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=module.HELP,
            epilog=getattr(module, "EXAMPLES", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    try:
        return int(_load(args.command).run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError) as exc:
        # Bad input is the user's to fix: one line saying what and where, no traceback.
        print(f"memgym {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
