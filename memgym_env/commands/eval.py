"""``memgym eval``: score a memory system on LoCoMo, LongMemEval or PerLTQA."""

from __future__ import annotations

import argparse
import dataclasses

from memgym_env.benchmarks import BENCHMARKS
from memgym_env.benchmarks.judges import JUDGE_MODES
from memgym_env.benchmarks.runner import EvalConfig, evaluate
from memgym_env.benchmarks.systems import SYSTEMS

HELP = "Evaluate a memory system on LoCoMo, LongMemEval or PerLTQA (resumable; JSON + report + plot)."

EXAMPLES = """examples:
  memgym eval --benchmark locomo --data ../shared/data/locomo/locomo10_conv-26.json \\
      --system rag --answerer smollm2-135m --judge smollm2-135m --out runs/locomo-rag --limit 20
  memgym eval --benchmark longmemeval --data longmemeval_s_cleaned.json.gz --system membuilder \\
      --model smollm2-135m --out runs/lme-s
  memgym eval --benchmark locomo --data ../shared/data/locomo/locomo10_conv-26.json --system mem0 \\
      --out runs/locomo-mem0 --limit 20          # Mem0 as published, raw turns (pip install 'memgym[peers]')
  memgym eval --benchmark locomo --data ../shared/data/locomo/locomo10_conv-26.json --system mem0-infer \\
      --model openai:Qwen/Qwen3-4B@http://127.0.0.1:8000/v1 --out runs/locomo-mem0-infer
  memgym eval --benchmark perltqa --data perltmem_en_v2.json --qa-data perltqa_en_v2.json \\
      --system oracle-evidence --out runs/perltqa-oracle

Run the same command again to resume: finished questions and built memories are reused.
LoCoMo reports print the category mapping (1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop, 5 adversarial); the headline is categories 1-4, category 5 is apart.
"""


def _at_least(low: int):
    """An argparse type: an integer >= ``low`` (``--limit -1`` or ``--batch-size 0`` is a usage error,
    before any model loads)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    choices = {"benchmark": BENCHMARKS, "system": SYSTEMS, "judge_mode": JUDGE_MODES}
    for f in dataclasses.fields(EvalConfig):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        required = f.default is dataclasses.MISSING
        if f.type in (bool, "bool"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default,
                                help=help_text + f" (default: {'on' if f.default else 'off'})")
            continue
        kind = _at_least(f.metadata["min"]) if "min" in f.metadata else int if f.type in (int, "int", "int | None") else str
        parser.add_argument(flag, type=kind, required=required, choices=choices.get(f.name),
                            default=None if required else f.default,
                            help=help_text + ("" if required or f.default is None else f" (default: {f.default})"))


def run(args: argparse.Namespace) -> int:
    names = {f.name for f in dataclasses.fields(EvalConfig)}
    cfg = EvalConfig(**{k: v for k, v in vars(args).items() if k in names})
    evaluate(cfg)
    return 0
