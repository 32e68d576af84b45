"""The judge-free grounding measure: a written entry's content words found in the session or the memory shown."""

from __future__ import annotations

from membuilder.agents.constructor import shown_texts
from membuilder.memory.grounding import (
    GROUNDED_SHARE,
    Grounding,
    content_words,
    grounded_share,
    share_in,
    unsaid_capitals,
    written_units,
)
from membuilder.memory.ops import parse
from membuilder.training.policy_eval import grounding_of

SESSION = "Caroline: I lost my job last week. I'm going to open a dance studio downtown."


def test_catalog_phrases_are_not_grounded_in_a_dialogue_about_something_else():
    assert grounded_share("Workout routine: yoga practice", [SESSION]) == 0.0
    assert grounded_share("Caroline lost her job and plans a dance studio downtown", [SESSION]) >= GROUNDED_SHARE
    assert grounded_share("the and of", [SESSION]) is None  # no content words: nothing to judge
    assert "details" not in content_words("Coffee: pour-over | Details: First mentioned by the user")


def test_written_units_take_a_rewrites_new_lines_and_each_entry():
    before = "Job: teacher\nCity: Boston"
    core = parse("core", '{"operation": "REWRITE", "content": "Job: teacher\\nCity: Boston\\nPlan: dance studio"}')
    assert written_units(core.ops, before) == ["Plan: dance studio"]
    entries = parse("semantic", '{"operations": [{"action": "ADD", "memory": "Plan: dance studio"}, '
                                '{"action": "UPDATE", "old_memory": "Job: teacher", "new_memory": "Job: none"}]}')
    assert written_units(entries.ops) == ["Plan: dance studio", "Job: none"]


def test_grounding_counts():
    g = Grounding()
    for share in (1.0, 0.5, None, 0.7):
        g.add(share)
    assert g.to_dict() == {"entries": 3, "grounded": 2, "grounded_rate": 2 / 3, "mean_share": 2.2 / 3}


def test_policy_evaluation_reports_grounding_per_agent():
    obs = {"s1": {"session": SESSION, "core": "Job: teacher", "episodic": (), "semantic": ("Pet: a cat",),
                  "procedural": ()}}
    outputs = {"s1": {"core": '{"operation": "REPLACE", "old_text": "teacher", "new_text": "lost the job last week"}',
                      "episodic": '{"operations": [{"action": "ADD", "memory": "Caroline lost her job last week"}]}',
                      "semantic": '{"operations": [{"action": "ADD", "memory": "Workout routine: yoga practice"}]}',
                      "procedural": "not json"}}
    g = grounding_of(outputs, obs)
    assert g["episodic"]["grounded"] == 1 and g["semantic"]["grounded"] == 0
    assert g["procedural"]["entries"] == 0  # an invalid output writes nothing to judge
    assert g["all"]["entries"] == 3 and g["all"]["grounded"] == 2


def test_a_date_taken_from_the_sessions_time_is_grounded():
    """The writer is shown the session's time: an entry dated from it is not invented (grounding rule 2)."""
    obs = {"session": SESSION, "session_time": "1:56 pm on 8 May, 2023", "core": "", "episodic": (),
           "semantic": (), "procedural": ()}
    outputs = {"s1": {"core": "no", "semantic": "no", "procedural": "no",
                      "episodic": '{"operations": [{"action": "ADD", "memory": "8 May 2023: Caroline lost her job"}]}'}}
    assert grounding_of(outputs, {"s1": obs})["episodic"]["grounded"] == 1
    assert shown_texts(obs)[:2] == [SESSION, "1:56 pm on 8 May, 2023"]
    without_time = grounded_share("8 May 2023: Caroline lost her job", [SESSION])
    assert without_time is not None and without_time < GROUNDED_SHARE


def test_an_invented_entry_copied_from_memory_is_grounded_in_the_memory_not_in_the_dialogue():
    invented = "Pet: a Labrador retriever named Biscuit"
    heard = content_words(SESSION)
    assert grounded_share(invented, [SESSION, invented]) == 1.0  # the copy is in the memory shown
    assert share_in(invented, heard) == 0.0  # no word of it was ever said
    assert share_in("Caroline lost her job", heard) == 1.0 and share_in("the and", heard) is None


def test_an_invented_name_passes_the_share_rule_and_shows_as_a_capitalised_word_never_said():
    heard = content_words("Caroline: I looked at adoption agencies today. (9 June, 2023)")
    entry = "Adoption agencies: 'Carsmel' | Details: First mentioned by the user on 9 June, 2023."
    assert share_in(entry, heard) >= GROUNDED_SHARE  # 4 of its 5 content words were said
    assert unsaid_capitals(entry, heard) == ["Carsmel"]
    # said names, the format's own labels and a possessive are not flagged; each word is named once
    assert unsaid_capitals("Caroline's plan | Details: Changed on or before 9 June", heard) == []
    assert unsaid_capitals("Learning goal: Carsmel and Carsmel", heard) == ["Learning", "Carsmel"]
