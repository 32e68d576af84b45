"""LoCoMo, LongMemEval and PerLTQA: readers into ``Conversation``, their scoring rules, the
evaluation runner (``memgym eval``) and a training callback.

Readers are cheap to import; the runner and the callback import models lazily.

    >>> from memgym_env.benchmarks import load_benchmark
    >>> convs, problems = load_benchmark("locomo", "../shared/data/locomo/locomo10_conv-26.json")
"""

from __future__ import annotations

from pathlib import Path

from memgym_env.conversation import Conversation

from .loading import BadRecordError, Problems, read_json
from .locomo import HEADLINE_CATEGORIES, LOCOMO_CATEGORIES, read_locomo
from .longmemeval import LONGMEMEVAL_TYPES, read_longmemeval
from .perltqa import read_perltqa

BENCHMARKS = ("locomo", "longmemeval", "perltqa")


def load_benchmark(name: str, path: str | Path, qa_path: str | Path | None = None,
                   skip_bad: bool = False, limit: int | None = None) -> tuple[list[Conversation], Problems]:
    """Read a benchmark file. ``qa_path`` is PerLTQA's QA file (default: next to the memory file).
    ``limit`` (questions) lets LongMemEval, one question per conversation, stop reading early."""
    problems = Problems(skip_bad=skip_bad)
    if name == "locomo":
        convs = read_locomo(path, problems)
    elif name == "longmemeval":
        convs = read_longmemeval(path, problems, limit=limit)
    elif name == "perltqa":
        convs = read_perltqa(path, qa_path, problems)
    else:
        raise ValueError(f"unknown benchmark {name!r}; expected one of {', '.join(BENCHMARKS)}")
    return convs, problems


__all__ = [
    "BENCHMARKS", "BadRecordError", "HEADLINE_CATEGORIES", "LOCOMO_CATEGORIES", "LONGMEMEVAL_TYPES",
    "Problems", "load_benchmark", "read_json", "read_locomo", "read_longmemeval", "read_perltqa",
]
