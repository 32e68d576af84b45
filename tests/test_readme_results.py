"""The README quotes the committed results; these checks keep the two from drifting apart."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _table_rows(text: str, header_start: str) -> list[str]:
    """The rows of the first markdown table whose header line starts with ``header_start``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line.strip())
    return rows


def test_the_readme_shows_the_ladder_table_that_results_ladder_md_holds():
    """``make ladder`` rewrites results/ladder.md; the README's copy of its table must follow it."""
    header = "| stage | seed |"
    ours = _table_rows((ROOT / "README.md").read_text(encoding="utf-8"), header)
    results = _table_rows((ROOT / "results" / "ladder.md").read_text(encoding="utf-8"), header)
    assert len(results) > 2, "results/ladder.md has no stage rows"
    assert ours == results, ("README.md's ladder table differs from results/ladder.md: copy it over with "
                             "python scripts/readme_ladder.py")


def test_the_readme_states_every_ladder_goal_as_results_ladder_md_reads_it():
    """Each goal line ("... above ...: yes/no (...)") of results/ladder.md appears word for word in the README."""
    results = (ROOT / "results" / "ladder.md").read_text(encoding="utf-8")
    after = results.split("Goals, read off the intervals:", 1)[1].lstrip("\n").splitlines()
    lines = []
    for line in after:  # the bullet list right below the heading; other sections follow it
        if not line.startswith("- "):
            break
        lines.append(line.strip())
    assert lines, "results/ladder.md states no goals"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [line for line in lines if line not in readme]
    assert not missing, (f"README.md lacks these goal lines of results/ladder.md (python scripts/readme_ladder.py "
                         f"copies them): {missing}")


def test_the_copy_script_replaces_the_readmes_table_and_goals_and_nothing_else():
    spec = importlib.util.spec_from_file_location("readme_ladder", ROOT / "scripts" / "readme_ladder.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    readme = ("# Ladder\n\nIntro.\n\n| stage | seed | reward |\n|---|---|---|\n| sft | 0 | 0.1 |\n\n"
              "- SFT above base: yes (0.1)\n\n![plot](results/ladder.png)\n")
    results = ("Held-out: 48 sessions.\n\n| stage | seed | reward |\n|---|---|---|\n| sft | 0 | 0.1 |\n"
               "| adrpo | 1 | 0.2 |\n\nGoals, read off the intervals:\n\n- SFT above base: yes (0.1)\n"
               "- ADRPO seed 1 above SFT: no (0.2)\n\nLearning signal:\n\n- not a goal\n")
    new = script.updated(readme, results, Path("ladder.md"))
    assert new == ("# Ladder\n\nIntro.\n\n| stage | seed | reward |\n|---|---|---|\n| sft | 0 | 0.1 |\n"
                   "| adrpo | 1 | 0.2 |\n\n- SFT above base: yes (0.1)\n- ADRPO seed 1 above SFT: no (0.2)\n\n"
                   "![plot](results/ladder.png)\n")
    assert script.updated(new, results, Path("ladder.md")) == new  # a second copy changes nothing
    with pytest.raises(SystemExit, match="ladder.md: no ladder table"):
        script.updated(readme, "no results yet\n", Path("ladder.md"))
    assert script.main(["--check"]) == 0  # the committed README follows the committed results
