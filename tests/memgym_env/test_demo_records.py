"""The demo's closing tables print one block per row: readable at 80 columns and in a log, nothing cut."""

from __future__ import annotations

from memgym_env.demo.report import as_records, interactive_table


def test_records_keep_every_figure_and_name_whole_within_80_columns():
    overall = {"accuracy": 0.5, "upper_bound": 0.6, "memory_score": -0.333333, "write": 0.625, "read": 0.2,
               "utilization": 0.1, "questions": 16, "accuracy_ci95": [0.28, 0.72], "memory_score_ci95": [-0.67, 0.0]}
    results = {name: {"overall": overall, "usage_by_stage": {"answer": {"calls": 12345}}}
               for name in ("membuilder-untrained", "smollm2-135m-memgym-with-a-long-name", "rag")}
    rows = interactive_table(results)
    text = as_records(rows, width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    for row in rows[1:]:
        assert row[0] in lines  # each name whole, on its own line
        for col, value in zip(rows[0][1:], row[1:], strict=True):
            assert f"{col} {value}" in text  # each figure whole, beside its column's name
    assert "…" not in text
