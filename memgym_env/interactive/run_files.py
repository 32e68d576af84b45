"""A run folder's layout, shared by the runner that writes it and the results that read it.

``<out>/run.json`` says what was run; ``<out>/users/<user>/period_<pp>/`` holds one period's
``interactions.json``, ``state/`` and ``evaluation.json`` (written last: its presence marks the
period as done). Every file of it is written atomically (``membuilder.plumbing.json_files.write_json``).
"""

from __future__ import annotations

import json
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


def question_outcomes(run: Path) -> dict[str, float]:
    """Every answered question of a run folder, ``"<user>/<period>/<question id>" -> 1.0`` when answered right,
    else 0.0: two runs on the same world pair question by question (probes are not questions)."""
    out: dict[str, float] = {}
    for path in sorted(Path(run).glob("users/*/period_*/evaluation.json")):
        try:
            evaluation = json.loads(path.read_text(encoding="utf-8"))
            for q in evaluation["questions"]:
                out[f"{evaluation['user']}/{evaluation['period']}/{q['id']}"] = float(bool(q["correct"]))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a period evaluation with questions ({exc!r})") from exc
    return out
