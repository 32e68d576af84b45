"""Role prompts as template files (``$name`` placeholders), one per agent and task."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from string import Template

_DIR = Path(__file__).resolve().parent


@cache
def _template(name: str) -> Template:
    path = _DIR / f"{name}.md"
    if not path.exists():
        raise FileNotFoundError(f"no prompt template {name!r} in {_DIR}")
    return Template(path.read_text(encoding="utf-8"))


def render(name: str, **values: object) -> str:
    """Fill a template; a missing value is an error, never an empty hole in a prompt."""
    try:
        return _template(name).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise KeyError(f"prompt {name!r} needs a value for {exc}") from None
