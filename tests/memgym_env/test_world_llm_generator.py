"""The LLM world generator's mechanics: checks, bounded retries, recorded fallbacks, resume.

Two kinds of model drive it here. ``ScriptedChatModel`` is a stand-in for a remote LLM (it
implements the ``ChatModel`` protocol with fixed replies, so the retry and fallback paths run in
milliseconds and deterministically); the slow test runs the real SmolLM2-135M on a one-user,
one-period world, where only the mechanics are expected to hold, not the quality.
"""

import json

import pytest

from membuilder.llm.base import Completion, Usage
from memgym_env.world.config import WorldConfig
from memgym_env.world.llm_generator import LLMWorldGenerator
from memgym_env.world.validate import world_issues

TINY = WorldConfig(num_users=1, num_periods=1, num_questions=1, changes_per_period=1, changes_jitter=0)


class ScriptedChatModel:
    """Stand-in for a remote chat model: one fixed reply, and always prefers the first option."""

    name = "scripted"

    def __init__(self, reply: str = "Scripted reply.", fail: bool = False):
        self.reply, self.fail, self.usage = reply, fail, Usage()
        self.prompts: list[str] = []

    def generate(self, conversations, sampling=None):
        if self.fail:
            raise ConnectionError("server went away")
        self.prompts += [c[-1]["content"] for c in conversations]
        return [Completion(text=self.reply) for _ in conversations]

    def choice_logprobs(self, conversation, choices):
        if self.fail:
            raise ConnectionError("server went away")
        return [-float(i) for i in range(len(choices))]

    def count_tokens(self, text):
        return len(text.split())


def test_failed_checks_are_retried_a_bounded_number_of_times_then_reported():
    model = ScriptedChatModel()
    world, report = LLMWorldGenerator(model, TINY, max_retries=2).generate()
    assert world_issues(world) == []
    assert report.users_done == 1
    assert report.retries > 0
    steps = {f.step for f in report.failures}
    assert {"event", "profile"} <= steps  # "Scripted reply." neither names the user nor tells an event
    # A fixed reply is never recovered as every variant: some answers fall back to the catalog.
    assert "answer" in steps
    refinements = [p for p in model.prompts if p.startswith("Your answer did not make")]
    assert 0 < len(refinements) <= 2 * sum(len(q.answer_choices) for q in world[0].qas)


def test_model_errors_never_stop_the_run():
    world, report = LLMWorldGenerator(ScriptedChatModel(fail=True), TINY, max_retries=1).generate()
    assert world_issues(world) == []
    assert any("model error: ConnectionError" in f.detail for f in report.failures)
    assert "fell back to the catalog" in report.summary()


def test_answers_that_pass_the_classifier_are_used():
    # Choosing option A is right for the first variant only; that answer must be the model's text.
    world, _ = LLMWorldGenerator(ScriptedChatModel("A thoughtful, personal answer."), TINY, max_retries=0).generate()
    first = world[0].qas[0].answer_choices[0]
    assert first.answer == "A thoughtful, personal answer."
    answers = [c.answer for c in world[0].qas[0].answer_choices]
    assert len(set(answers)) == len(answers)


def test_progress_is_saved_per_user_and_resumed(tmp_path):
    cfg = WorldConfig(**{**TINY.__dict__, "num_users": 2})
    first_world, first = LLMWorldGenerator(ScriptedChatModel(), cfg, work_dir=tmp_path).generate()
    assert sorted(p.name for p in tmp_path.glob("user_*.json")) == ["user_0000.json", "user_0001.json"]
    assert json.loads((tmp_path / "report.json").read_text())["users_done"] == 2
    (tmp_path / "user_0001.json").unlink()  # as if the run had stopped after the first user
    model = ScriptedChatModel()
    world, report = LLMWorldGenerator(model, cfg, work_dir=tmp_path).generate()
    assert (report.users_resumed, report.users_done) == (1, 1)
    assert world[0].user_profile == first_world[0].user_profile


@pytest.mark.slow
def test_smollm2_generates_a_one_user_one_period_world(tmp_path):
    from membuilder.llm import load_chat_model

    model = load_chat_model("smollm2-135m")
    gen = LLMWorldGenerator(model, TINY, work_dir=tmp_path, max_retries=0, max_new_tokens=24)
    world, report = gen.generate()
    assert world_issues(world) == []
    assert report.users_done == 1 and report.generate_calls > 0 and report.choice_calls > 0
    assert (tmp_path / "user_0000.json").exists()
