"""Copy the ladder's table and goal lines from results/ladder.md into the README and the ladder's README.

``python -m train.ladder ... --report_only true`` rewrites results/ladder.md; README.md and
train/ladder/README.md quote its table and its goals word for word (tests/test_readme_results.py checks the
README). Run this after every report:

    python scripts/readme_ladder.py            # rewrites both blocks
    python scripts/readme_ladder.py --check    # exit 1 if a block is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project, whichever Python runs this

from membuilder.plumbing.json_files import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
HEADER = "| stage | seed |"
GOALS = "Goals, read off the intervals:"
READMES = ("README.md", "train/ladder/README.md")  # each holds the table and goals once


def block(lines: list[str], start: int) -> int:
    """The end (exclusive) of the table starting at ``start`` and of the bullet list right after it."""
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    after = end + 1 if end < len(lines) and not lines[end].strip() else end
    if after < len(lines) and lines[after].startswith("- "):
        end = after
        while end < len(lines) and lines[end].startswith("- "):
            end += 1
    return end


def results_block(results: str, source: Path) -> list[str]:
    lines = results.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
        goals_at = lines.index(GOALS)
    except (StopIteration, ValueError) as err:
        raise SystemExit(f"{source}: no ladder table ({HEADER!r}) or no goals ({GOALS!r}) to copy") from err
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    table = lines[start:end]
    goals = []
    for line in lines[goals_at + 1:]:
        if goals and not line.startswith("- "):
            break
        if line.startswith("- "):
            goals.append(line)
    return [*table, "", *goals]


def updated(readme: str, results: str, source: Path, where: str = "README.md") -> str:
    lines = readme.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    except StopIteration as err:
        raise SystemExit(f"{where}: no ladder table ({HEADER!r}) to replace") from err
    end = block(lines, start)
    return "\n".join([*lines[:start], *results_block(results, source), *lines[end:]]) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    results_path = ROOT / "results" / "ladder.md"
    results = results_path.read_text(encoding="utf-8")
    stale = []
    for name in READMES:
        path = ROOT / name
        readme = path.read_text(encoding="utf-8")
        new = updated(readme, results, results_path, name)
        if new == readme:
            continue
        stale.append(name)
        if "--check" not in argv:
            atomic_write_text(path, new)
            print(f"{name}: ladder table and goals copied from results/ladder.md")
    if stale and "--check" in argv:
        print(f"{', '.join(stale)}: the ladder table or goals differ from results/ladder.md: run scripts/readme_ladder.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
