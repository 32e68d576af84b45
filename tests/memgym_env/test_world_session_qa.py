"""Session QA and the conversion of a world user into a Conversation."""

import collections

import pytest
from test_world_data_json import EXAMPLE

from memgym_env.world.config import SessionQAConfig, WorldConfig
from memgym_env.world.data_json import read_world
from memgym_env.world.offline import generate_world
from memgym_env.world.session_qa import category_counts, session_qa
from memgym_env.world.to_conversation import period_questions, user_to_conversation


@pytest.fixture(scope="module")
def user():
    return generate_world(WorldConfig(num_users=1, num_periods=4))[0]


def test_default_mix_of_five_is_three_one_one():
    assert category_counts(5, {"single-session": 0.5, "multi-session": 0.3, "temporal": 0.2}) == {
        "single-session": 3, "multi-session": 1, "temporal": 1}
    assert category_counts(10, {"single-session": 0.5, "multi-session": 0.3, "temporal": 0.2}) == {
        "single-session": 5, "multi-session": 3, "temporal": 2}


def test_every_session_gets_at_least_three_questions_with_choices(user):
    items = session_qa(user)
    order = [r.id for r in user.sessions()]
    per = collections.Counter(q.session for q in items)
    assert set(per) == {r.id for r in user.sessions()}
    assert min(per.values()) >= 3
    for q in items:
        assert q.answer in q.choices and len(set(q.choices)) == len(q.choices) >= 2
        assert q.category in ("single-session", "multi-session", "temporal")
        # Evidence is this session or earlier ones: nothing asked can come from the future.
        assert q.evidence and all(order.index(e) <= order.index(q.session) for e in q.evidence)


def test_mix_is_followed_where_candidates_allow(user):
    items = [q for q in session_qa(user) if q.session.startswith("p2") or q.session.startswith("p3")]
    counts = collections.Counter(q.category for q in items)
    share = {c: n / len(items) for c, n in counts.items()}
    assert abs(share["single-session"] - 0.5) < 0.15 and abs(share["temporal"] - 0.2) < 0.15


def test_mix_is_configurable(user):
    only_temporal = session_qa(user, SessionQAConfig(per_session=3, mix={"temporal": 1.0}))
    later = [q for q in only_temporal if q.session.startswith("p3")]
    assert collections.Counter(q.category for q in later)["temporal"] >= len(later) // 2


def test_answers_are_true_at_the_session():
    user = read_world(EXAMPLE)[0]
    items = {q.question: q for q in session_qa(user) if q.session == "p1-s1"}
    before_after = [q for text, q in items.items() if text.startswith("What was my coffee brewing method before")]
    assert before_after and before_after[0].answer == "before: a French press; now: pour-over with a gooseneck kettle"
    assert items["How do I make my coffee?"].answer == "pour-over with a gooseneck kettle"


def test_same_seed_same_questions(user):
    assert session_qa(user, seed=3) == session_qa(user, seed=3)


def test_world_user_to_conversation(user):
    conv = user_to_conversation(user)
    assert [s.id for s in conv.sessions] == [r.id for r in user.sessions()]
    first = conv.sessions[0]
    assert first.time == user.periods[0].sessions[0].session_time
    assert first.messages[0].role == "user" and first.messages[0].content == user.periods[0].sessions[0].query
    assert first.meta["exposed_states"] == user.periods[0].sessions[0].exposed_states
    assert conv.qa_for_session(first.id)
    assert type(conv).from_dict(conv.to_dict()).to_dict() == conv.to_dict()


def test_session_without_messages_becomes_its_request():
    user = read_world(EXAMPLE)[0]
    conv = user_to_conversation(user)
    assert [m.content for m in conv.sessions[0].messages] == [user.periods[0].sessions[0].query]


def test_period_questions_mark_the_current_answer():
    user = read_world(EXAMPLE)[0]
    items = period_questions(user, 2)
    assert items[0].answer == items[0].choices[2]
    assert items[0].meta["required_info"] == ["diet_type", "home_city_size"]


def test_a_temporal_question_names_the_value_its_date_is_about(user):
    temporal = [q for q in session_qa(user) if q.category == "temporal"]
    assert temporal and all(q.meta.get("about") for q in temporal)
    states = {ref.id: ref.session.exposed_states for ref in user.sessions()}
    for q in temporal:  # the value was revealed in the evidence session
        [var] = q.meta["variables"]
        assert user.info(var).text(states[q.evidence[-1]][var]) == q.meta["about"]


def test_evidence_mode_counts_a_date_only_beside_the_fact_it_dates(user):
    from memgym_env.construction.answers import gold_in_context

    q = next(q for q in session_qa(user) if q.category == "temporal")
    other_fact = f"{q.answer}: talked about the weather | Details: nothing personal."
    assert not gold_in_context(q, f"Core: likes tea\n{other_fact}\nEarlier: {q.meta['about']} (some other day)")
    assert gold_in_context(q, f"Core: likes tea\n{q.answer}: the user said: {q.meta['about']}.")
    single = next(q for q in session_qa(user) if q.category == "single-session")
    assert "about" not in single.meta and gold_in_context(single, f"note one\n{single.answer}")
