"""bench/peers_side_by_side.py's table, from results.json files as `memgym eval` writes them."""

from __future__ import annotations

import json

from bench import peers_side_by_side as bench


def _results(invocations: list[dict]) -> dict:
    items = [{"category": 1, "correct": True}, {"category": 1, "correct": False}, {"category": 5, "correct": True}]
    return {"items": items, "summary": {"headline": {"f1": 0.25, "recall_at_k": 0.5}},
            "run": {"invocations": invocations, "judge_check": {"agreement": 0.9, "trusted": True, "n": 20},
                    "builds": {"conv-26": {"memories": 4, "failed_analyses": 1, "failed_evolutions": 1,
                                           "writes_refused": 0}}}}


def test_a_resumed_run_shows_every_invocations_build_cost_and_the_peers_embeddings(tmp_path):
    first = {"stages": {"build": {"wall_s": 120.0, "prompt_tokens": 900, "completion_tokens": 100,
                                  "embed_calls": 6, "embedded_texts": 6},
                        "retrieve": {"wall_s": 0.5, "embedded_texts": 2}}}
    resumed = {"stages": {"build": {"wall_s": 0.2, "prompt_tokens": 0, "completion_tokens": 0},
                          "retrieve": {"wall_s": 0.25}}}
    folder = tmp_path / "locomo" / "a-mem"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(_results([first, resumed])))
    text = bench.collected(tmp_path)
    header, _, line = text.splitlines()
    assert "failed writes" in header and "build embedded texts" in header
    # judged 2 (category 5 apart), build 120 s and 1,000 tokens from the first invocation, 6 texts
    # embedded by A-Mem itself, 4 notes, 2 failed writes (one analysis, one evolution)
    assert line.startswith("| locomo | a-mem | 2 | 50.0 ")
    assert line.endswith("| 120 | 0.8 | 1000 | 6 | 4 | 2 |")
