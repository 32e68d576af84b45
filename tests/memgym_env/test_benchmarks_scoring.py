"""LoCoMo F1 per category rule, judge prompts and parsing, retrieval metrics and report aggregation."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memgym_env.benchmarks import read_locomo, read_longmemeval, read_perltqa
from memgym_env.benchmarks.judges import judge_prompt, parse_label, parse_yes_no
from memgym_env.benchmarks.locomo_f1 import locomo_f1, multi_part_f1, normalize_answer, token_f1
from memgym_env.benchmarks.report import markdown, plot, summarize
from memgym_env.benchmarks.retrieval_metrics import anchor_coverage, recall_at_k

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
LOCOMO = DATA / "locomo" / "locomo10_conv-26.json"
LME_ORACLE = DATA / "longmemeval" / "longmemeval_oracle_sample.json"
PERL_MEM = DATA / "perltqa" / "perltmem_en_v2_wang_xiaoming.json"


# ---- LoCoMo token F1 -------------------------------------------------------------------------

def test_normalisation_drops_commas_punctuation_and_articles():
    assert normalize_answer("The cats, and a Dog!") == "cats dog"


def test_category2_plain_token_f1_by_hand():
    # prediction tokens: she went on 7 may 2023 (6); gold: 7 may 2023 (3); common 3
    # precision 3/6, recall 3/3 -> F1 = 2 * 0.5 * 1 / 1.5
    assert locomo_f1("She went on 7 May 2023", "7 May 2023", 2) == pytest.approx(2 / 3)


def test_porter_stemming_matches_inflections():
    assert token_f1("running", "runs") == 1.0
    assert token_f1("painted sunsets", "painting a sunset") == 1.0


def test_category1_mean_of_best_match_per_gold_part():
    assert locomo_f1("Norway", "Sweden, Norway", 1) == pytest.approx(0.5)
    # one predicted part "i think sweden norway" (4 tokens) vs each one-token gold part: F1 = 2*(1/4)*1/(5/4) = 0.4
    assert locomo_f1("I think Sweden and Norway", "Sweden, Norway", 1) == pytest.approx(0.4)
    assert multi_part_f1("Norway, Sweden", "Sweden, Norway") == 1.0


def test_category3_scores_only_gold_before_semicolon():
    gold = "Likely no; though she likes reading, she wants to be a counselor"
    assert locomo_f1("likely no", gold, 3) == 1.0
    assert token_f1("likely no", gold) < 0.5  # without the rule


def test_category5_needs_the_published_not_available_phrases():
    assert locomo_f1("That was not mentioned in the conversation.", None, 5) == 1.0
    assert locomo_f1("No information available.", "No", 5) == 1.0
    assert locomo_f1("She realised self-care is important.", None, 5) == 0.0
    assert locomo_f1("Not answerable", None, 5) == 0.0  # the published rule knows only its two phrases


def test_gold_answer_scores_one_on_every_conv26_item_of_categories_1_to_4():
    [conv] = read_locomo(LOCOMO)
    items = [q for q in conv.qa if q.category != 5]
    assert len(items) == 152
    # category 3 golds carry a rationale after ';' that an answer need not repeat
    assert all(locomo_f1(q.answer.split(";")[0], q.answer, q.category) == 1.0 for q in items)
    with_rationale = [q for q in items if q.category == 3 and ";" in q.answer]
    assert len(with_rationale) == 5 and all(locomo_f1(q.answer, q.answer, 3) < 1.0 for q in with_rationale)


@given(st.text(max_size=40), st.text(max_size=40))
def test_token_f1_is_symmetric_and_bounded(a, b):
    f = token_f1(a, b)
    assert 0.0 <= f <= 1.0
    assert f == pytest.approx(token_f1(b, a))


# ---- judges ----------------------------------------------------------------------------------

def test_judge_label_parsing():
    assert parse_label('{"label": "CORRECT"}') is True
    assert parse_label('Reasoning... ```json\n{"label": "WRONG"}\n```') is False
    assert parse_label("<think>maybe CORRECT</think> WRONG.") is False
    assert parse_label("INCORRECT") is False
    assert parse_label("I cannot tell") is None
    # an echo of the instructions names both labels: no decision
    assert parse_label("The generated answer is CORRECT when it points to the same thing, and it is WRONG") is None
    assert parse_label("The generated answer is CORRECT when it points to the same t") is None  # echo cut short
    assert parse_label("Label: WRONG") is False and parse_label("**CORRECT**") is True
    assert parse_label("The answer names the same date.\nCORRECT") is True


def test_yes_no_parsing():
    assert parse_yes_no("Yes.") is True
    assert parse_yes_no("no, the response says 3") is False
    assert parse_yes_no("not sure") is None  # 'not' is not 'no'
    assert parse_yes_no("The response says yes to one part and no to another") is None
    assert parse_yes_no("I think yes") is True


def test_locomo_adversarial_item_without_gold_is_judged_on_declining():
    [conv] = read_locomo(LOCOMO)
    q = next(q for q in conv.qa if q.category == 5 and q.answer is None)
    text = judge_prompt("locomo", q, "Self-care")[1]["content"]
    assert q.meta["adversarial_answer"] in text and "cannot be answered" in text
    assert '{"label": "CORRECT"}' in text


def test_locomo_judge_defaults_to_the_published_generous_criteria_and_keeps_the_strict_prompt():
    from memgym_env.benchmarks.judges import prompt_identity, prompt_name

    [conv] = read_locomo(LOCOMO)
    q = next(q for q in conv.qa if q.category == 2)
    generous = judge_prompt(prompt_name("locomo"), q, "last week")[1]["content"]
    assert "touches on the same topic" in generous and "in any format" in generous and '"label"' in generous
    strict = judge_prompt(prompt_name("locomo", "strict"), q, "last week")[1]["content"]
    assert "leaves out the key fact" in strict and "same topic" not in strict
    ids = {name: prompt_identity(name) for name in ("locomo", "locomo-strict")}
    assert ids["locomo"]["sha256"] != ids["locomo-strict"]["sha256"] and len(ids["locomo"]["sha256"]) == 64
    with pytest.raises(ValueError, match="expected 'published'"):
        prompt_name("longmemeval", "strict")


def test_longmemeval_prompt_follows_the_type_rules():
    convs = {c.qa[0].category: c.qa[0] for c in read_longmemeval(LME_ORACLE) if not c.qa[0].meta["abstention"]}
    assert "off-by-one" in judge_prompt("longmemeval", convs["temporal-reasoning"], "x")[1]["content"]
    assert "updated answer" in judge_prompt("longmemeval", convs["knowledge-update"], "x")[1]["content"]
    assert "Rubric:" in judge_prompt("longmemeval", convs["single-session-preference"], "x")[1]["content"]
    plain = judge_prompt("longmemeval", convs["multi-session"], "x")[1]["content"]
    assert "off-by-one" not in plain and "yes or no" in plain
    abs_item = next(c.qa[0] for c in read_longmemeval(LME_ORACLE) if c.qa[0].meta["abstention"])
    assert "cannot be answered" in judge_prompt("longmemeval", abs_item, "x")[1]["content"]


# ---- retrieval metrics -----------------------------------------------------------------------

def test_recall_at_k_counts_reference_ids_in_the_top_k():
    hits = [["1_0_0"], ["1_2_0", "1_2_0#6"], ["1_0_1"]]
    assert recall_at_k(hits, ["1_0_0", "1_0_1"], k=2) == 0.5
    assert recall_at_k(hits, ["1_0_0", "1_0_1"], k=3) == 1.0
    assert recall_at_k(hits, [], k=3) is None


def test_anchor_coverage_on_a_real_perltqa_item():
    [conv] = read_perltqa(PERL_MEM)
    q = next(q for q in conv.qa if q.question == "What is Wang Xiaoming's educational background?")
    assert anchor_coverage("He has a Bachelor's degreeComputer Science and Technology graduate diploma", q.meta["anchors"]) == 1.0
    assert anchor_coverage("He studied physics", q.meta["anchors"]) == 0.0
    assert anchor_coverage("He is 28", ["28", "Short hair"]) == 0.5
    assert anchor_coverage("anything", []) is None


# ---- report ----------------------------------------------------------------------------------

def _locomo_records(correct_if):
    [conv] = read_locomo(LOCOMO)
    return [{"category": q.category, "correct": correct_if(q), "f1": 1.0 if correct_if(q) else 0.0} for q in conv.qa]


def test_locomo_headline_is_categories_1_to_4_and_category5_apart(tmp_path):
    s = summarize("locomo", _locomo_records(lambda q: q.category == 1))
    assert s["headline"]["count"] == 152 and s["headline"]["accuracy"] == pytest.approx(32 / 152)
    assert s["adversarial"]["count"] == 47 and s["adversarial"]["accuracy"] == 0.0
    assert s["categories"]["3"]["name"] == "open-domain"
    md = markdown(s)
    assert "1 = multi-hop, 2 = temporal, 3 = open-domain, 4 = single-hop, 5 = adversarial" in md
    assert "| headline (1-4) | 152 | 21.05 |" in md
    assert plot(s, tmp_path / "p.png").stat().st_size > 1000


def test_unparsed_verdict_counts_as_wrong_and_is_shown():
    recs = [{"category": 4, "correct": True}, {"category": 4, "correct": None}]
    s = summarize("locomo", recs)
    assert s["categories"]["4"]["accuracy"] == 0.5 and s["categories"]["4"]["unparsed_verdicts"] == 1


def test_longmemeval_task_average_differs_from_overall():
    convs = read_longmemeval(LME_ORACLE)
    recs = [{"category": c.qa[0].category, "abstention": c.qa[0].meta["abstention"],
             "correct": c.qa[0].category == "multi-session"} for c in convs]
    s = summarize("longmemeval", recs)
    assert s["overall"]["count"] == 28 and s["overall"]["accuracy"] == pytest.approx(5 / 28)
    assert s["task_averaged_accuracy"] == pytest.approx(1 / 6)
    assert s["abstention"]["count"] == 4 and s["abstention"]["accuracy"] == pytest.approx(1 / 4)


def test_memory_classification_f1_by_hand():
    from memgym_env.benchmarks.memory_classification import classification_scores

    gold = ["profile", "profile", "events", "events", "events", "dialogues"]
    pred = ["profile", "events", "events", "events", "dialogues", "dialogues"]
    s = classification_scores(gold, pred)
    # profile: tp 1, predicted 1, gold 2 -> P 1, R 1/2, F1 2/3
    # events: tp 2, predicted 3, gold 3 -> P 2/3, R 2/3, F1 2/3
    # dialogues: tp 1, predicted 2, gold 1 -> P 1/2, R 1, F1 2/3
    for kind in ("profile", "events", "dialogues"):
        assert s["per_kind"][kind]["f1"] == pytest.approx(2 / 3)
    assert s["per_kind"]["profile"]["recall"] == pytest.approx(0.5)
    assert s["per_kind"]["events"]["precision"] == pytest.approx(2 / 3)
    # social_relationship never occurs in gold: reported, but left out of the averages
    assert s["per_kind"]["social_relationship"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0,
                                                    "predicted": 0}
    assert s["macro_f1"] == pytest.approx(2 / 3) and s["weighted_f1"] == pytest.approx(2 / 3)
    assert s["accuracy"] == pytest.approx(4 / 6)
    skewed = classification_scores(["events"] * 3 + ["profile"], ["events"] * 4)
    assert skewed["macro_f1"] == pytest.approx((2 * 0.75 / 1.75) / 2)
    assert skewed["weighted_f1"] == pytest.approx(0.75 * (2 * 0.75 / 1.75))
    with pytest.raises(ValueError, match="3 gold labels but 2"):
        classification_scores(["a", "b", "c"], ["a", "b"])
