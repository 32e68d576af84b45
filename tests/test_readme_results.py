"""The README quotes the committed results; these checks keep the two from drifting apart."""

from __future__ import annotations

from pathlib import Path

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
    assert ours == results, ("README.md's ladder table differs from results/ladder.md: copy the table over "
                             "(python train/ladder.py --report_only true rewrites results/ladder.md)")


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
    assert not missing, f"README.md lacks these goal lines of results/ladder.md: {missing}"
