"""``memgym report``: compare interactive runs side by side."""

from __future__ import annotations

import argparse
from pathlib import Path

from memgym_env.interactive.results import compare

HELP = "Compare `memgym evaluate` runs: table, plots, and on-policy vs off-policy ranks."

EXAMPLES = """examples:
  memgym report runs/all/native runs/all/rag runs/rag-off
  memgym report runs/all/* --plots runs/compare
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", help="run folders (each with results.json)")
    parser.add_argument("--plots", default=None, help="folder for memory_score.png and failures.png")


def run(args: argparse.Namespace) -> int:
    print(compare(args.runs, plots=Path(args.plots) if args.plots else None))
    return 0
