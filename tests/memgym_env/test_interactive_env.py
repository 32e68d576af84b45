"""MemoryGym-Interactive-v0 without a model: spaces, episode structure, answer parsing, determinism."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import memgym_env  # noqa: F401  (registers the environments)
from memgym_env.interactive.env import (
    MESSAGE,
    PROBE,
    QUESTION,
    InteractiveEnv,
    choice_or_random,
    parse_answer,
)
from memgym_env.interactive.evolution import feedback_text
from memgym_env.interactive.simulator import ReplaySimulator, TemplateSimulator
from memgym_env.world import WorldConfig, generate_world


@pytest.fixture(scope="module")
def world():
    return generate_world(WorldConfig(num_users=2, num_periods=2, num_questions=3, changes_per_period=2))


def play(env, answer="1", reply="Sure.", seed=0, user=0):
    obs, info = env.reset(seed=seed, options={"user": user})
    trace = [(obs, info)]
    while True:
        obs, reward, term, trunc, info = env.step(reply if obs["kind"] == MESSAGE else answer)
        trace.append((obs, reward, info))
        if term or trunc:
            return trace


def test_registered_and_passes_gymnasiums_checker(world):
    env = gym.make("MemoryGym-Interactive-v0", world=world)
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("text, expected", [
    ('{"answer": 2}', 1), ("2", 1), (" 3 ", 2), ("2. For a new hobby", 1), ("Option 3", 2),
    ('```json\n{"answer": "4"}\n```', 3), ('{"answer": 9}', None), ("0", None), ("I would pick the second", None),
    ('{"answer": true}', None), ('{"choice": 2}', None), ("", None), (None, None),
])
def test_parse_answer(text, expected):
    assert parse_answer(text, 4) == expected


def test_unparseable_answer_is_a_seeded_flagged_random_choice():
    picks = {choice_or_random("no idea", 4, f"0-u-1-q{i}") for i in range(40)}
    assert all(not parsed for _, parsed in picks)
    assert {c for c, _ in picks} == {0, 1, 2, 3}  # uniform over the options, not a fixed fallback
    assert choice_or_random("no idea", 4, "0-u-1-q0") == choice_or_random("no idea", 4, "0-u-1-q0")
    assert choice_or_random('{"answer": 2}', 4, "k") == (1, True)


def test_episode_talks_then_examines_each_period(world):
    env = InteractiveEnv(world, probes=True)
    user = world[0]
    trace = play(env)
    first_obs, first_info = trace[0]
    assert first_obs["text"].startswith(f"[Current Time: {user.periods[0].sessions[0].session_time}]")
    assert first_info["true_state"] == user.periods[0].state
    ended = [t[2]["session_end"] for t in trace[1:] if "session_end" in t[2]]
    assert [s["id"] for s in ended] == [r.id for r in user.sessions()]
    sim = TemplateSimulator()
    assert [len(s["messages"]) for s in ended] == [2 * sim.rounds(user, r) for r in user.sessions()]
    answers = [t[2]["answer"] for t in trace[1:] if "answer" in t[2]]
    n_vars = len({v for q in user.qas for v in q.required_info})
    assert len(answers) == len(user.periods) * (len(user.qas) + n_vars)
    evals = [t[2]["evaluation"] for t in trace[1:] if "evaluation" in t[2]]
    assert len(evals) == len(user.periods) and all("correct" not in json.dumps(e) for e in evals)
    for _, reward, info in trace[1:]:
        a = info.get("answer")
        assert reward == (1.0 if a and a["kind"] == "question" and a["correct"] else 0.0)
    assert [t[2]["period_end"] for t in trace[1:] if "period_end" in t[2]] == list(range(len(user.periods)))


def test_questions_carry_the_current_correct_choice(world):
    env = InteractiveEnv(world)
    user = world[1]
    trace = play(env, user=1)
    for _, _, info in trace[1:]:
        a = info.get("answer")
        if a and a["kind"] == "question":
            q = user.qas[int(a["id"][1:])]
            assert a["correct_index"] == q.correct_choice(user.periods[info.get("period_end", info["period"])].state)


def test_probes_ask_every_required_variable_with_its_values(world):
    env = InteractiveEnv(world)
    env.reset(seed=0, options={"start_period": len(world[0].periods) - 1})
    while env.phase == "talk":
        env.step("ok")
    probes = [it for it in env.items if it.kind == PROBE]
    assert {p.id[2:] for p in probes} == {v for q in world[0].qas for v in q.required_info}
    assert all(len(p.choices) == len(world[0].state_schema[p.id[2:]]) for p in probes)
    assert env.items[0].kind == QUESTION


def test_same_seed_same_episode(world):
    a = play(InteractiveEnv(world), answer="not a number", seed=3)
    b = play(InteractiveEnv(world), answer="not a number", seed=3)
    strip = [(t[0], t[1], t[2]) if len(t) == 3 else t for t in a]
    assert strip == [(t[0], t[1], t[2]) if len(t) == 3 else t for t in b]


def test_replay_simulator_feeds_the_recorded_user_turns(world):
    user = world[0]
    recorded = {f"{user.id}/{r.id}": [{"role": "user", "content": f"[Current Time: x] hello {r.id}"},
                                       {"role": "assistant", "content": "hi"},
                                       {"role": "user", "content": f"more {r.id}"}] for r in user.sessions()}
    env = InteractiveEnv(world, simulator=ReplaySimulator(recorded))
    trace = play(env)
    ended = [t[2]["session_end"] for t in trace[1:] if "session_end" in t[2]]
    for s in ended:
        assert [m["content"] for m in s["messages"] if m["role"] == "user"][1] == f"more {s['id']}"
        assert s["messages"][0]["content"].endswith(f"hello {s['id']}")


def test_bad_action_and_bad_start_period_are_clear_errors(world):
    env = InteractiveEnv(world)
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action must be a str"):
        env.step(3)
    with pytest.raises(ValueError, match="start_period 9"):
        env.reset(seed=0, options={"start_period": 9})


def test_complete_feedback_labels_the_given_answer_with_its_own_number():
    q = {"question": "Which hobby?", "choices": ["chess", "golf", "darts"], "choice": 1, "correct_index": 2}
    text = feedback_text("complete", [q], {"Main hobby": ("chess", "darts")})
    assert "Answer given: 2. golf" in text and "Right answer: 3. darts" in text
    assert "- Main hobby: darts (before: chess)" in text
    only = feedback_text("question-only", [q], {})
    assert only == "Question 1: Which hobby?"


def test_complete_feedback_shows_the_memories_the_assistant_retrieved(tiny_chat_path):
    from membuilder.agents.assistants import make_assistant
    from membuilder.llm import load_chat_model
    from memgym_env.interactive.evolution import evolve

    awi = make_assistant("awi", load_chat_model(tiny_chat_path), write_tokens=8)
    awi.reset("u1")
    awi.load_dict({"notes": [{"label": "Hobby", "value": "plays golf on Sundays", "time": "2021-03-01"}]})
    q = {"question": "Which hobby?", "choices": ["chess", "golf", "darts"], "choice": 1, "correct_index": 2}
    record = evolve(awi, awi.model, "complete", [q], {"Main hobby": ("golf", "darts")}, time="2021-06-30")
    assert "Memories retrieved for it:\n    Hobby: plays golf on Sundays (noted 2021-03-01)" in record["feedback"]
    assert "Memories retrieved" not in evolve(awi, awi.model, "question-only", [q], {})["feedback"]
    long = feedback_text("complete", [q | {"memories": "x" * 5000}], {})
    assert len(long) < 1000  # the memories are cut, the best hits (last) kept


class RecordingModel:
    """A chat model stand-in that answers "How long should that take?" and keeps every prompt."""

    def __init__(self):
        self.prompts = []

    def generate(self, prompts, sampling=None, **kw):
        from membuilder.llm.base import Completion

        self.prompts += [p[-1]["content"] for p in prompts]
        return [Completion(text="How long should that take?") for _ in prompts]


def test_the_llm_simulator_reads_the_whole_conversation_and_the_template_one_reads_no_reply(world):
    from memgym_env.interactive.simulator import LLMSimulator, TemplateSimulator, reads_replies

    user = world[0]
    ref = list(user.sessions())[-1]
    history = [{"role": "user", "content": f"[Current Time: {ref.session.session_time}] {ref.session.query}"},
               {"role": "assistant", "content": "First, write down three small goals."},
               {"role": "user", "content": "Which goals?"},
               {"role": "assistant", "content": "Start with sleep."}]
    model = RecordingModel()
    assert LLMSimulator(model).follow_up(user, ref, 2, history) == "How long should that take?"
    assert "Assistant: First, write down three small goals." in model.prompts[0]  # not only the last two
    assert ref.session.query in model.prompts[0] and "[Current Time" not in model.prompts[0]
    template = TemplateSimulator(seed=0)
    other = history[:1] + [{"role": "assistant", "content": "Something else entirely."}]
    assert template.follow_up(user, ref, 1, history[:2]) == template.follow_up(user, ref, 1, other)
    assert reads_replies("llm") and not reads_replies("template")


def test_an_on_policy_report_with_the_template_simulator_says_what_on_policy_covers():
    from memgym_env.interactive.results import notes, policy_note

    note = policy_note({"mode": "on-policy", "simulator": "template"})
    assert "on-policy only in the assistant's own turns" in note
    assert policy_note({"mode": "on-policy", "simulator": "llm"}) is None
    assert policy_note({"mode": "off-policy", "simulator": "template"}) is None
    assert notes([{"assistant": "rag", "policy_note": note, "overall": {}}]).strip().startswith(
        "note (rag): the template simulator")
