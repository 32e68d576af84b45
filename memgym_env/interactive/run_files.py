"""A run folder's layout, shared by the runner that writes it and the results that read it.

``<out>/run.json`` says what was run; ``<out>/users/<user>/period_<pp>/`` holds one period's
``interactions.json``, ``state/`` and ``evaluation.json`` (written last: its presence marks the
period as done).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memgym_env.world.types import WorldUser

RUN_FILE = "run.json"


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    tmp.replace(path)  # atomic: an interrupted run never leaves half a file


def period_dir(run: Path, user_id: str, period: int) -> Path:
    return run / "users" / user_id / f"period_{period:02d}"


def finished_periods(run: Path, user: WorldUser) -> int:
    """How many leading periods of ``user`` are complete in ``run``."""
    n = 0
    while n < len(user.periods) and (period_dir(run, user.id, n) / "evaluation.json").exists():
        n += 1
    return n
