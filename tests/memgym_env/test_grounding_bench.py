"""bench/grounding_locomo.py builds memory over LoCoMo conv-26 with a writer and reports grounding."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import grounding_locomo  # noqa: E402
import pytest  # noqa: E402

from memgym_env.benchmarks.grounding import dialogue_so_far, distinct_grounding, with_unsaid  # noqa: E402
from memgym_env.benchmarks.locomo import read_locomo  # noqa: E402


def test_grounding_bench_on_one_session_with_a_tiny_writer(tiny_chat_path, shared_data, tmp_path):
    out = tmp_path / "g.json"
    grounding_locomo.main(["--data", str(shared_data / "locomo" / "locomo10_conv-26.json"), "--writers", tiny_chat_path,
                           "--sessions", "1", "--max-new-tokens", "8", "--out", str(out)])
    result = json.loads(out.read_text())
    r = result["writers"][tiny_chat_path]
    assert result["sessions"] == 1 and set(r["per_agent"]) == {"core", "episodic", "semantic", "procedural"}
    assert 0 <= r["all"]["grounded"] <= r["all"]["entries"]
    md = out.with_suffix(".md").read_text()
    assert md.startswith("LoCoMo ")
    # eight tokens close no operation's JSON: the table says why the writes were invalid
    assert f"- {tiny_chat_path}: core " in md and "Invalid outputs per agent" in md


def test_grounding_bench_writes_long_sessions_in_windows(tiny_chat_path, shared_data, tmp_path):
    """--window-tokens: conv-26's first session (about 800 tokens) is written as several windows, each one output
    per agent; validity is the share of those outputs."""
    out = tmp_path / "w.json"
    grounding_locomo.main(["--data", str(shared_data / "locomo" / "locomo10_conv-26.json"), "--writers", tiny_chat_path,
                           "--sessions", "1", "--max-new-tokens", "4", "--window-tokens", "160", "--out", str(out)])
    result = json.loads(out.read_text())
    r = result["writers"][tiny_chat_path]
    assert result["window_tokens"] == 160 and r["window_tokens"] == 160
    assert r["sessions"] == 1 and r["outputs"] >= 3 and r["grounding_rule"] == 2
    # both measures over the same entries, each entry kept with its window and shares
    assert r["dialogue"]["all"]["entries"] == r["all"]["entries"] == len(r["writes"])
    assert all(0 <= w["window"] < r["outputs"] and w["agent"] in r["per_agent"] for w in r["writes"])
    assert all(isinstance(w["unsaid"], list) for w in r["writes"])
    assert r["distinct"] == distinct_grounding(json.loads(json.dumps(r["writes"])))
    # every invalid output is counted under its first error, numbers blanked, with the first one kept (four tokens
    # cannot close an operation's JSON, so there are some)
    assert sum(d["outputs"] for d in r["invalid"].values()) > 0
    for agent, d in r["invalid"].items():
        assert d["outputs"] == round((1 - r["valid_rate"][agent]) * r["outputs"])
        assert sum(x["outputs"] for x in d["reasons"]) <= d["outputs"]
        assert all(not any(ch.isdigit() for ch in x["reason"]) for x in d["reasons"])
        assert (d["example"] is None) == (d["outputs"] == 0)


def test_distinct_entries_count_the_capitalised_words_never_said_once_each():
    writes = [{"text": "Agency: Carsmel", "shown": 0.5, "dialogue": 0.5, "unsaid": ["Carsmel"]},
              {"text": "agency:  carsmel", "shown": 0.5, "dialogue": 0.5, "unsaid": []},  # a copy: not counted
              {"text": "School: Carsmel", "shown": 0.5, "dialogue": 0.5, "unsaid": ["Carsmel"]},
              {"text": "Caroline lost her job", "shown": 1.0, "dialogue": 1.0, "unsaid": []}]
    u = distinct_grounding(writes)["unsaid"]
    assert u["entries"] == 2 and u["words"] == [("Carsmel", 2)] and u["ci"][0] < 2 / 3 < u["ci"][1]
    # writes cached before the check say nothing about it, rather than zero
    assert "unsaid" not in distinct_grounding([{k: v for k, v in w.items() if k != "unsaid"} for w in writes])


def test_distinct_entries_count_a_copied_line_once_and_name_questions():
    writes = [{"text": "Pet: a Labrador", "shown": 0.0, "dialogue": 0.0},
              {"text": "pet:  a labrador", "shown": 1.0, "dialogue": 0.0},  # the same line copied on
              {"text": "Career: which one did she choose?", "shown": 1.0, "dialogue": 1.0},
              {"text": "Caroline lost her job", "shown": 1.0, "dialogue": 1.0}]
    d = distinct_grounding(writes)
    assert d["entries"] == 3 and d["questions"] == 1
    assert (d["shown"]["entries"], d["shown"]["grounded"]) == (3, 2)  # the copy's 1.0 is not counted
    assert (d["dialogue"]["entries"], d["dialogue"]["grounded"]) == (3, 2)


def _words(text: str) -> int:
    return len(text.split())


def test_a_cache_without_the_words_never_said_gets_them_from_the_dialogue_up_to_each_window(shared_data):
    """'Charity' is first said in conv-26's second session: an entry naming it is flagged where it was written in
    the first session and not where it was written at the end of the second; nothing is generated."""
    sessions = read_locomo(shared_data / "locomo" / "locomo10_conv-26.json")[0].sessions[:2]
    windows = [(s.id, w) for s, w, _, _ in dialogue_so_far(sessions, 160, _words)]
    first, last = windows[0], windows[-1]
    assert first[0] != last[0] and len(windows) > 2
    text = "Charity race: Melanie ran one"
    old = {"outputs": len(windows), "window_tokens": 160, "sessions": 2,
           "writes": [{"session": sid, "window": w, "agent": "semantic", "text": text, "shown": 1.0, "dialogue": 1.0}
                      for sid, w in (first, last)]}
    filled = with_unsaid(old, sessions, _words)
    assert [w["unsaid"] for w in filled["writes"]] == [["Charity"], []]
    assert filled["distinct"]["unsaid"]["entries"] == 1  # one text, counted where it was first written
    assert "unsaid" not in old["writes"][0]  # the cached result itself is left as it was
    assert with_unsaid(filled, sessions, _words) is filled
    # windows cut by another tokenizer would pair entries with the wrong dialogue: refused, not guessed
    with pytest.raises(ValueError, match="not the tokenizer or sessions"):
        with_unsaid({**old, "outputs": len(windows) + 1}, sessions, _words)
