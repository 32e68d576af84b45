"""Users' own conversation, QA and expert files: read through the JSON guard, every fault naming file and record."""

from __future__ import annotations

import json

import pytest

from membuilder.plumbing.json_files import JSONLimitError
from memgym_env.construction.episodes import conversation_episodes
from memgym_env.conversation import Conversation, Message, QAItem, Session

DEEP = "[" * 100_000 + "]" * 100_000  # 200 KB that would drive json.loads into RecursionError


def _conversation() -> Conversation:
    return Conversation(id="c1", sessions=[Session(id="s1", time="2024-01-02", messages=[
        Message(role="user", content="I moved to Lyon.")])])


def test_a_saved_conversation_loads_back_the_same(tmp_path):
    conv = _conversation()
    conv.qa.append(QAItem(id="q1", question="Where do I live?", answer="Lyon", session="s1"))
    conv.save(tmp_path / "c.json")
    assert Conversation.load(tmp_path / "c.json") == conv
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_a_conversation_file_nested_too_deeply_is_refused_before_parsing(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(DEEP, encoding="utf-8")
    with pytest.raises(JSONLimitError, match=rf"{path}: JSON nested deeper than 200 levels"):
        Conversation.load(path)
    with pytest.raises(JSONLimitError, match=rf"{path}: JSON nested deeper"):
        conversation_episodes(path)


def test_a_conversation_file_that_is_not_an_object_names_file_and_record(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('[{"id": "c1", "sessions": []}, "oops"]', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}: conversation\[1\]: expected a conversation object, got str"):
        conversation_episodes(path)
    path.write_text('{"id": "c1"', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{path}: not valid JSON"):
        Conversation.load(path)


@pytest.mark.parametrize(("qa", "message"), [
    (DEEP, "JSON nested deeper than 200 levels"),
    ('[{"id": "q1"', "not valid JSON"),
    ('{"id": "q1"}', "expected a list of QA items, got dict"),
    ('[{"id": "q1", "question": "Where?", "answer": "Lyon", "session": "s1"}, 7]', r"qa\[1\]: expected an object, got int"),
    ('[{"id": "q1", "question": "Where?", "answer": "Lyon", "colour": "red"}]', r"qa\[0\]: .*'colour'"),
    ('[{"id": "q1", "question": "Where?", "answer": "Lyon", "session": "s9"}]', r"qa\[0\]: field 'session' 's9' names no session"),
])
def test_a_bad_qa_file_names_file_record_and_field(tmp_path, qa, message):
    _conversation().save(tmp_path / "c.json")
    qa_path = tmp_path / "qa.json"
    qa_path.write_text(qa, encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{qa_path}: {message}"):
        conversation_episodes(tmp_path / "c.json", qa_path=qa_path)


def test_qa_items_beside_the_conversation_join_the_session_they_name(tmp_path):
    _conversation().save(tmp_path / "c.json")
    (tmp_path / "qa.json").write_text(json.dumps([{"id": "q1", "question": "Where do I live?", "answer": "Lyon",
                                                   "session": "s1"}]), encoding="utf-8")
    (episode,) = conversation_episodes(tmp_path / "c.json", qa_path=tmp_path / "qa.json")
    assert [q.id for q in episode.conversation.qa_for_session("s1")] == ["q1"]


def test_a_bad_expert_line_names_file_and_line(tmp_path):
    _conversation().save(tmp_path / "c.json")
    experts = tmp_path / "experts.jsonl"
    experts.write_text('{"conversation": "c1", "session": "s1", "outputs": {}}\n\n{"conversation": "c1", "session": "s2"}\n',
                       encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{experts}: line 3: not an expert record .*KeyError: 'outputs'"):
        conversation_episodes(tmp_path / "c.json", expert_path=experts)
    experts.write_text(DEEP[:1000] + "\n", encoding="utf-8")
    with pytest.raises(JSONLimitError, match=rf"{experts}: line 1: JSON nested deeper"):
        conversation_episodes(tmp_path / "c.json", expert_path=experts)
