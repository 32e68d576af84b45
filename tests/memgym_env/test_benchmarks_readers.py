"""The three benchmark readers on the real samples in ../shared/data, and their bad-input errors."""

from __future__ import annotations

import collections
import copy
import gzip
import json
from pathlib import Path

import pytest

from memgym_env.benchmarks import BadRecordError, load_benchmark, read_locomo, read_longmemeval, read_perltqa
from memgym_env.benchmarks.perltqa import parse_reference
from memgym_env.conversation import Conversation

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
LOCOMO = DATA / "locomo" / "locomo10_conv-26.json"
LME_ORACLE = DATA / "longmemeval" / "longmemeval_oracle_sample.json"
LME_S = DATA / "longmemeval" / "longmemeval_s_sample.json"
PERL_MEM = DATA / "perltqa" / "perltmem_en_v2_wang_xiaoming.json"
PERL_QA = DATA / "perltqa" / "perltqa_en_v2_wang_xiaoming.json"


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ---- LoCoMo -------------------------------------------------------------------------------

def test_locomo_conv26_has_19_sessions_and_199_questions_by_category():
    [conv] = read_locomo(LOCOMO)
    assert conv.id == "conv-26"
    assert len(conv.sessions) == 19  # 35 date keys, only 19 list-valued session keys
    assert [s.id for s in conv.sessions][:3] == ["session_1", "session_2", "session_3"]
    assert conv.sessions[0].time == "1:56 pm on 8 May, 2023"
    assert len(conv.qa) == 199
    assert collections.Counter(q.category for q in conv.qa) == {1: 32, 2: 37, 3: 13, 4: 70, 5: 47}


def test_locomo_image_turn_carries_its_caption():
    [conv] = read_locomo(LOCOMO)
    turn = next(m for m in conv.sessions[0].messages if m.meta["id"] == "D1:5")
    assert "[shares an image: a photo of a dog walking past a wall" in turn.content
    assert turn.speaker == "Caroline" and turn.role == "user"


def test_locomo_category5_keeps_adversarial_answer_and_no_gold():
    [conv] = read_locomo(LOCOMO)
    cat5 = [q for q in conv.qa if q.category == 5]
    no_gold = [q for q in cat5 if q.answer is None]
    assert len(no_gold) == 45  # 2 of conv-26's 47 category-5 items also carry an 'answer'
    assert all(q.meta["adversarial_answer"] for q in cat5)


def test_locomo_integer_answers_become_text():
    [conv] = read_locomo(LOCOMO)
    cast = [q for q in conv.qa if "answer_was" in q.meta]
    assert len(cast) == 6
    assert {q.answer for q in cast} == {"2022", "2", "3"}


def test_locomo_joined_evidence_ids_are_split_and_resolve():
    [conv] = read_locomo(LOCOMO)
    q = conv.qa[37]
    assert q.evidence == ["D8:6", "D9:17"] and q.meta["evidence_raw"] == ["D8:6; D9:17"]
    assert q.session == "session_9"  # the latest session holding evidence
    assert conv.meta["unresolved_evidence"] == 0


def test_locomo_unresolved_evidence_is_kept_and_counted(tmp_path):
    data = json.loads(LOCOMO.read_text())
    data[0]["qa"][0]["evidence"] = ["D1:3", "D99:1"]
    [conv] = read_locomo(_write(tmp_path / "l.json", data))
    assert conv.qa[0].evidence == ["D1:3", "D99:1"]
    assert conv.qa[0].meta["unresolved_evidence"] == ["D99:1"]
    assert conv.meta["unresolved_evidence"] == 1


def test_locomo_item_without_any_answer_names_file_sample_and_item(tmp_path):
    data = json.loads(LOCOMO.read_text())
    i = next(i for i, q in enumerate(data[0]["qa"]) if q["category"] == 5 and "answer" not in q)
    del data[0]["qa"][i]["adversarial_answer"]
    path = _write(tmp_path / "bad.json", data)
    with pytest.raises(BadRecordError, match=rf"LoCoMo file .*bad.json, sample conv-26, qa\[{i}\]: no 'answer' and no 'adversarial_answer'"):
        read_locomo(path)


def test_skip_bad_counts_the_dropped_item_and_keeps_the_rest(tmp_path):
    data = json.loads(LOCOMO.read_text())
    del data[0]["qa"][3]["question"]
    convs, problems = load_benchmark("locomo", _write(tmp_path / "bad.json", data), skip_bad=True)
    assert problems.count == 1 and "qa[3]: no 'question'" in problems.messages[0]
    assert len(convs[0].qa) == 198


def test_reader_accepts_gzip(tmp_path):
    gz = tmp_path / "locomo10.json.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(LOCOMO.read_text())
    [conv] = read_locomo(gz)
    assert len(conv.qa) == 199


def test_not_json_is_a_clear_error(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(BadRecordError, match="broken.json: not a readable JSON file"):
        read_locomo(path)


def test_conversation_round_trips_through_json(tmp_path):
    [conv] = read_locomo(LOCOMO)
    conv.save(tmp_path / "c.json")
    again = Conversation.load(tmp_path / "c.json")
    assert again.to_dict() == conv.to_dict()


# ---- LongMemEval ----------------------------------------------------------------------------

def test_longmemeval_oracle_one_conversation_per_question_with_types_and_abstention():
    convs = read_longmemeval(LME_ORACLE)
    assert len(convs) == 28 and all(len(c.qa) == 1 for c in convs)
    types = collections.Counter(c.qa[0].category for c in convs if not c.qa[0].meta["abstention"])
    assert set(types.values()) == {4} and len(types) == 6
    abstention = [c.id for c in convs if c.qa[0].meta["abstention"]]
    assert len(abstention) == 4 and all(a.endswith("_abs") for a in abstention)
    assert convs[0].meta["variant"] == "oracle"


def test_longmemeval_integer_answers_and_question_dates():
    convs = {c.id: c for c in read_longmemeval(LME_ORACLE)}
    assert convs["0a995998"].qa[0].answer == "3" and convs["6d550036"].qa[0].answer == "2"
    assert convs["gpt4_2655b836"].qa[0].question_date == "2023/04/10 (Mon) 23:07"


def test_longmemeval_keeps_same_day_session_order_as_given():
    conv = next(c for c in read_longmemeval(LME_ORACLE) if c.id == "gpt4_2655b836")
    assert [s.time for s in conv.sessions] == ["2023/04/10 (Mon) 17:50", "2023/04/10 (Mon) 14:47", "2023/04/10 (Mon) 17:15"]


def test_longmemeval_evidence_is_the_has_answer_turns():
    conv = next(c for c in read_longmemeval(LME_ORACLE) if c.id == "gpt4_2655b836")
    q = conv.qa[0]
    assert len(q.evidence) == 2
    ids = {m.meta["id"]: m for s in conv.sessions for m in s.messages}
    assert all(ids[e].meta.get("has_answer") for e in q.evidence)
    assert set(q.meta["answer_session_ids"]) == {s.id for s in conv.sessions}


def test_longmemeval_s_sample_haystack_sizes():
    convs = read_longmemeval(LME_S)
    assert [len(c.sessions) for c in convs] == [53, 45, 40]
    assert convs[0].meta["variant"] == "s"
    assert convs[0].qa[0].session == "answer_280352e9"


def test_longmemeval_length_mismatch_is_named(tmp_path):
    data = json.loads(LME_ORACLE.read_text())[:2]
    data[1]["haystack_dates"] = data[1]["haystack_dates"][:-1]
    with pytest.raises(BadRecordError, match=r"question gpt4_2487a7cb: 'haystack_sessions', 'haystack_session_ids' and 'haystack_dates' differ"):
        read_longmemeval(_write(tmp_path / "lme.json", data))


# ---- PerLTQA --------------------------------------------------------------------------------

def test_perltqa_character_sessions_and_question_counts():
    [conv] = read_perltqa(PERL_MEM, PERL_QA)
    assert conv.id == "Wang Xiaoming"
    assert len(conv.sessions) == 2 + 24 + 23
    assert len(conv.sessions[0].messages) == 14 + 1  # 14 profile fields + the description
    assert len(conv.sessions[1].messages) == 9
    assert collections.Counter(q.category for q in conv.qa) == {"profile": 12, "social_relationship": 17, "events": 109, "dialogues": 104}
    assert conv.meta["unresolved_evidence"] == 0


def test_perltqa_qa_file_found_next_to_memory_file():
    [conv] = read_perltqa(PERL_MEM)
    assert len(conv.qa) == 242


def test_perltqa_sessions_ordered_by_time_with_free_text_dates():
    [conv] = read_perltqa(PERL_MEM, PERL_QA)
    ids = [s.id for s in conv.sessions]
    assert ids[:4] == ["profile", "relationships", "event:1_1_2", "event:1_1_1"]  # "2012" before "May 15, 2012"
    # "during an election" does not parse: the event takes its dialogue's date (2023-10-14), just before it.
    assert ids[-2:] == ["event:1_0_2", "dialogue:1_0_2#2"]


def test_perltqa_dialogue_lines_split_into_speakers():
    [conv] = read_perltqa(PERL_MEM, PERL_QA)
    d = next(s for s in conv.sessions if s.id == "dialogue:1_0_0#0")
    assert d.messages[0].speaker == "Wang Xiaoming" and d.messages[0].role == "user"
    assert d.messages[1].speaker == "Wang Xiaohong" and d.messages[1].role == "assistant"
    assert d.messages[0].content.startswith("We're finally here")


def test_perltqa_reference_memory_and_anchors():
    [conv] = read_perltqa(PERL_MEM, PERL_QA)
    q = next(q for q in conv.qa if q.question == "What is Wang Xiaoming's educational background?")
    assert q.evidence == ["Education Background"] and q.session == "profile"
    assert q.meta["anchors"] == ["Bachelor's degreeComputer Science and Technology graduate"]  # &#39; unescaped
    ev = next(q for q in conv.qa if q.category == "events")
    assert ev.evidence == ["1_0_0"] and ev.session == "event:1_0_0"


def test_reference_memory_is_parsed_as_a_literal_never_evaluated():
    assert parse_reference("['1_0_0', '1_0_1']") == ["1_0_0", "1_0_1"]
    assert parse_reference("Gender") == ["Gender"]
    with pytest.raises(ValueError):
        parse_reference("[__import__('os').getcwd()]")


def test_perltqa_bad_reference_memory_names_character_and_item(tmp_path):
    qa = json.loads(PERL_QA.read_text())
    bad = copy.deepcopy(qa)
    bad[0]["Wang Xiaoming"]["events"][0]["1_0_0"][1]["Reference Memory"] = "['1_0_0'"
    path = _write(tmp_path / "perltqa_bad.json", bad)
    with pytest.raises(BadRecordError, match=r"character Wang Xiaoming, events 1_0_0, qa\[1\]: field 'Reference Memory'"):
        read_perltqa(PERL_MEM, path)


def test_longmemeval_is_streamed_and_limit_stops_reading(tmp_path):
    records = json.loads(LME_ORACLE.read_text())
    gz = tmp_path / "longmemeval_m_cleaned.json.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(records[:3])[:-1] + ", {broken")  # a file cut off after three records
    first = read_longmemeval(gz, limit=2)  # never reaches the damage
    assert [c.id for c in first] == [r["question_id"] for r in records[:2]]
    assert first[0].meta["variant"] == "m"
    with pytest.raises(BadRecordError, match=r"longmemeval_m_cleaned.json.gz: not a readable JSON file after record 2"):
        read_longmemeval(gz)
    obj = _write(tmp_path / "longmemeval_s.json", {"question_id": "x"})
    with pytest.raises(BadRecordError, match="expected a JSON list of records"):
        read_longmemeval(obj)
