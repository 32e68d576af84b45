"""A run folder's layout, shared by the runner that writes it and the results that read it.

``<out>/run.json`` says what was run; ``<out>/users/<user>/period_<pp>/`` holds one period's
``interactions.json``, ``state/`` and ``evaluation.json`` (written last: its presence marks the
period as done). Every file of it is written atomically (``membuilder.plumbing.json_files.write_json``).
"""

from __future__ import annotations

from pathlib import Path

from memgym_env.world.types import WorldUser

RUN_FILE = "run.json"


def period_dir(run: Path, user_id: str, period: int) -> Path:
    return run / "users" / user_id / f"period_{period:02d}"


def finished_periods(run: Path, user: WorldUser) -> int:
    """How many leading periods of ``user`` are complete in ``run``."""
    n = 0
    while n < len(user.periods) and (period_dir(run, user.id, n) / "evaluation.json").exists():
        n += 1
    return n
