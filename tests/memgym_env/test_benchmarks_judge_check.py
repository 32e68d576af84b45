"""The judge's control test: known-right and known-wrong answers built from the run's questions."""

from __future__ import annotations

import json

from membuilder.llm.base import Completion
from memgym_env.benchmarks.judge_check import best_threshold, check_judge, control_pairs, describe
from memgym_env.conversation import QAItem

ITEMS = [QAItem("a", "Where does Ana live?", "Lisbon"),
         QAItem("b", "What pet does Ana have?", "a cat called Luna"),
         QAItem("c", "Which sport?", None, category=5),  # no gold: not a control
         QAItem("d", "How many sisters?", "2", meta={"abstention": True}),  # abstention: not a control
         QAItem("e", "When did she move?", "May 2021"),
         QAItem("f", "Where did she live before?", "in Lisbon")]  # contains another gold: never its "wrong" answer


class GoldLineJudge:
    """A stand-in grader for an API judge: CORRECT exactly when the response equals the gold line."""

    def __init__(self, always: str | None = None):
        self.always = always

    def generate(self, prompts, sampling=None, **kw):
        out = []
        for conv in prompts:
            text = conv[-1]["content"]
            gold = text.split("Gold answer: ")[1].split("\n")[0]
            got = text.split("Generated answer: ")[1].split("\n")[0]
            label = self.always or ("CORRECT" if got == gold else "WRONG")
            out.append(Completion(text=json.dumps({"label": label})))
        return out


def test_controls_skip_items_without_gold_and_pair_each_with_a_different_answer():
    pairs = control_pairs(ITEMS)
    right = [(it.id, resp) for it, resp, ok in pairs if ok]
    wrong = [(it.id, resp) for it, resp, ok in pairs if not ok]
    assert right == [("a", "Lisbon"), ("b", "a cat called Luna"), ("e", "May 2021"), ("f", "in Lisbon")]
    assert wrong == [("a", "a cat called Luna"), ("b", "May 2021"), ("e", "in Lisbon"), ("f", "a cat called Luna")]
    assert control_pairs(ITEMS) == pairs  # fixed order: a rerun grades the same controls
    assert control_pairs([ITEMS[2], ITEMS[3]]) == []


def test_an_exact_judge_is_trusted_and_a_yes_sayer_is_flagged():
    good = check_judge(GoldLineJudge(), "locomo", ITEMS, 8, "generate")
    assert good == {"n": 8, "controls": ["a", "b", "e", "f"] * 2, "agreement": 1.0, "accepts_wrong": 0.0,
                    "rejects_gold": 0.0, "threshold": None, "trusted": True}
    assert len(describe(good)) == 1 and "agreed with the truth on 100%" in describe(good)[0]
    yes = check_judge(GoldLineJudge(always="CORRECT"), "locomo", ITEMS, 8, "generate")
    assert yes["agreement"] == 0.5 and yes["accepts_wrong"] == 1.0 and yes["trusted"] is False
    assert "warning" in describe(yes)[1]
    assert check_judge(GoldLineJudge(), "locomo", ITEMS[2:4], 8, "generate")["n"] == 0


def test_best_threshold_separates_the_controls_and_prefers_the_cut_nearest_zero():
    # A yes-sayer: every margin positive, but the right answers score higher.
    margins, truth = [2.0, 1.5, 0.4, 0.2], [True, True, False, False]
    cut = best_threshold(margins, truth)
    assert cut == (1.5 + 0.4) / 2 and [m >= cut for m in margins] == truth
    assert best_threshold([1.0, -1.0], [True, False]) == 0.0  # already separated at 0: no correction
    assert best_threshold([0.5, 0.5], [True, False]) == 0.0  # nothing separates them: keep the judge's own cut


def test_controls_do_not_change_with_a_larger_question_set():
    many = [QAItem(f"q{i}", f"Question {i}?", f"answer {i}") for i in range(40)]
    assert control_pairs(many[:25]) == control_pairs(many)


def test_a_run_whose_judge_fails_its_check_reports_no_judge_figure_as_a_result(tmp_path, tiny_chat_path):
    from pathlib import Path

    from memgym_env.benchmarks.runner import EvalConfig, evaluate, load_model

    locomo = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo10_conv-26.json"
    cfg = EvalConfig(benchmark="locomo", data=str(locomo), out=str(tmp_path), system="oracle-evidence", limit=6,
                     answer_max_tokens=4, judge_mode="generate")
    summary = evaluate(cfg, {"answerer": load_model(tiny_chat_path), "judge": GoldLineJudge(always="CORRECT")},
                       quiet=True)
    assert summary["judge_check"]["trusted"] is False and summary["judge_check"]["accepts_wrong"] == 1.0
    report = (tmp_path / "report.md").read_text()
    assert "The judge failed its check" in report and "accepting 100% of the known-wrong ones" in report
    assert "Where answers fail (share of items)" not in report  # the clean-looking split of a yes-sayer
    assert "by the untrusted judge's verdicts (not a result): correct 100.00%" in report
    header = next(line for line in report.splitlines() if line.startswith("| category"))
    assert header.index("f1 %") < header.index("judge acc % (untrusted)")
    assert "| headline (1-4) | 6 |" in report and "(100.00)" in report
    assert "Evidence of each question (share of items; needs no judge): not written 0.00%" in report
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["run"]["judge_prompt"]["name"] == "locomo" and len(results["run"]["judge_prompt"]["sha256"]) == 64
    assert f"- judge_prompt: `locomo (sha256 {results['run']['judge_prompt']['sha256'][:12]})`" in report
    assert "MemBuilder's 84.23 may count category 5" in report
