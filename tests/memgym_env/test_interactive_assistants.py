"""The six assistants and the interactive runner with the real SmolLM2 and MiniLM (small settings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from membuilder.agents.assistant import Assistant
from membuilder.agents.assistants import ASSISTANTS, make_assistant
from membuilder.agents.choice import score_options
from memgym_env.interactive import evolution
from memgym_env.interactive.env import parse_answer
from memgym_env.interactive.run_files import period_dir
from memgym_env.interactive.runner import RunConfig, evaluate_one
from memgym_env.world import WorldConfig, generate_world, write_world

pytestmark = pytest.mark.slow

SESSION = [{"role": "user", "content": "[Current Time: 2021-03-01 19:00:00] I just adopted a beagle called Max."},
           {"role": "assistant", "content": "Congratulations on Max!"}]
ITEMS = [{"question": "What pet do I have?", "choices": ["a cat", "a beagle", "a parrot"]}]


@pytest.fixture(scope="module")
def model():
    from tests.llm_models import smollm2

    return smollm2()


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory):
    """One user, one question over two variables, one update period: 3 sessions in all."""
    world = generate_world(WorldConfig(num_users=1, num_periods=1, num_questions=1, changes_per_period=1,
                                       changes_jitter=0))
    path = tmp_path_factory.mktemp("world") / "world.json"
    write_world(world, path)
    return world, path


def test_fast_option_scoring_equals_choice_logprobs(model):
    conv = [{"role": "user", "content": "Pick a number.\n1. one\n2. two\n3. three"}]
    fast = score_options(model, [conv, conv], [["1", "2", "3"], ["1", "2"]])
    assert fast[0] == pytest.approx(model.choice_logprobs(conv, ["1", "2", "3"]), abs=1e-3)
    assert fast[1] == pytest.approx(fast[0][:2], abs=1e-3)  # batching does not change a prompt's scores
    slow = score_options(model, [conv], [["one", "two three four"]])  # multi-token labels: the exact fallback
    assert slow[0] == pytest.approx(model.choice_logprobs(conv, ["one", "two three four"]), abs=1e-4)


@pytest.mark.parametrize("name", ASSISTANTS)
def test_assistant_protocol_round_trip(name, model, embedder, tmp_path):
    a = make_assistant(name, model, embedder, reply_tokens=4, **({"write_tokens": 24} if name in ("awe", "awi", "membuilder") else {}))
    assert isinstance(a, Assistant)
    a.reset("u1")
    reply = a.act(SESSION[0]["content"], "2021-03-01 19:00:00")
    assert isinstance(reply, str) and a.session[-1] == {"role": "assistant", "content": reply}
    a.observe(SESSION, time="2021-03-01 19:00:00", session_id="p0-s0", facts={"Pet": "a beagle called Max"})
    assert a.session == []
    outs = a.answer(ITEMS, "2021-03-02") + a.probe(ITEMS, "2021-03-02")
    assert all(parse_answer(o, 3) is not None for o in outs)
    before = a.choice_prompt(ITEMS[0]["question"], ITEMS[0]["choices"], "2021-03-02")
    a.save_state(tmp_path)
    b = make_assistant(name, model, embedder, reply_tokens=4)
    b.load_state(tmp_path)
    assert b.choice_prompt(ITEMS[0]["question"], ITEMS[0]["choices"], "2021-03-02") == before
    if name in ("native", "rag", "oracle"):
        assert ("beagle" in a.memory_text()) and ("beagle" in b.memory_text())
    with pytest.raises(ValueError, match="expected"):
        make_assistant("oracle" if name != "oracle" else "native", model, embedder).load_state(tmp_path)


def test_unknown_option_is_an_error_naming_it(model, embedder):
    with pytest.raises(ValueError, match="top_kk"):
        make_assistant("rag", model, embedder, top_kk=3)


def cfg(path, out, assistant, **kw):
    settings = dict(reply_tokens=4, write_tokens=24, context_tokens=256, factual_recall=False) | kw
    return RunConfig(world=str(path), assistant=assistant, out=str(out), **settings)


def read(run: Path, user, name: str) -> list:
    return [json.loads((period_dir(run, user.id, p) / name).read_text()) for p in range(len(user.periods))]


@pytest.fixture(scope="module")
def native_run(model, tiny_world, tmp_path_factory):
    world, path = tiny_world
    out = tmp_path_factory.mktemp("runs") / "native"
    results = evaluate_one(cfg(path, out, "native", factual_recall=True), world, model, None, {})
    return out, results


def test_run_writes_results_report_and_plots(native_run, tiny_world):
    out, results = native_run
    assert (out / "results.json").exists() and (out / "report.txt").exists()
    assert (out / "plots" / "memory_score.png").stat().st_size > 0 and (out / "plots" / "failures.png").exists()
    o = results["overall"]
    assert o["write"] + o["read"] + o["utilization"] == pytest.approx(1 - o["accuracy"])
    assert len(results["per_period"]["memory_score"]) == len(tiny_world[0][0].periods)
    assert {"reply", "answer", "probe", "upper_bound", "check"} <= set(results["usage_by_stage"])


def test_oracle_recalls_every_fact_and_the_upper_bound_is_asked_once_per_choice_state(model, tiny_world, tmp_path):
    world, path = tiny_world
    results = evaluate_one(cfg(path, tmp_path / "oracle", "oracle", factual_recall=True), world, model, None, {})
    for e in read(tmp_path / "oracle", world[0], "evaluation.json"):
        assert len(e["upper_bound"]) == len(e["questions"])
        assert all(f["supported"] for f in e["factual_recall"])  # the true state holds every new fact
    assert results["overall"]["factual_recall"] == 1.0
    choices = sum(len(q.answer_choices) for q in world[0].qas)
    assert results["usage_by_stage"]["upper_bound"]["calls"] <= choices  # not once per period


def test_replay_reproduces_the_original_interactions(model, embedder, native_run, tiny_world, tmp_path):
    world, path = tiny_world
    original, _ = native_run
    results = evaluate_one(cfg(path, tmp_path / "rag-off", "rag", replay=str(original)), world, model, embedder, {})
    assert results["mode"] == "off-policy"
    assert read(tmp_path / "rag-off", world[0], "interactions.json") == read(original, world[0], "interactions.json")


def test_resume_after_an_interrupted_run_matches_an_uninterrupted_one(model, native_run, tiny_world, tmp_path):
    world, path = tiny_world
    original, _ = native_run

    def stop(user_id, period):
        raise KeyboardInterrupt

    run = tmp_path / "native"
    with pytest.raises(KeyboardInterrupt):
        evaluate_one(cfg(path, run, "native", factual_recall=True), world, model, None, {}, on_period_end=stop)
    assert (period_dir(run, world[0].id, 0) / "evaluation.json").exists()
    assert not (period_dir(run, world[0].id, 1) / "evaluation.json").exists()
    evaluate_one(cfg(path, run, "native", factual_recall=True), world, model, None, {})
    for name in ("interactions.json", "evaluation.json"):
        got, want = read(run, world[0], name), read(original, world[0], name)
        if name == "evaluation.json":
            for e in got + want:  # timing and usage differ between runs; everything else must not
                e.pop("usage"), e.pop("wall_s")
        assert got == want
    with pytest.raises(ValueError, match="different assistant"):
        evaluate_one(cfg(path, run, "oracle"), world, model, None, {})


def test_llm_simulator_writes_follow_ups_that_never_name_a_value(model, tiny_world):
    from memgym_env.interactive.simulator import LLMSimulator, value_phrases

    world, _ = tiny_world
    user = world[0]
    sim = LLMSimulator(model, max_new_tokens=24)
    ref = list(user.sessions())[-1]
    history = [{"role": "user", "content": f"[Current Time: {ref.session.date}] {ref.session.query}"},
               {"role": "assistant", "content": "That sounds like a big change. How do you feel about it?"}]
    line = sim.follow_up(user, ref, 1, history)
    assert line.strip() and not any(p in line.lower() for p in value_phrases(user))
    assert sim.follow_up(user, ref, 1, history) == line  # greedy: the same conversation, the same line
    assert model.ledger.to_dict()["by_purpose"]["simulate"]["calls"] >= 2


def test_self_evolution_rewrites_the_guide_with_the_real_model(model, embedder):
    awe = make_assistant("awe", model, embedder, reply_tokens=8, write_tokens=16)
    before = awe.guide
    questions = [{"question": "What pet do I have?", "choices": ["a cat", "a beagle"], "choice": 0, "correct_index": 1,
                  "correct": False}]
    record = evolution.evolve(awe, model, "complete", questions, {"Pet": ("a cat", "a beagle")})
    assert record["before"] == before and record["after"] == awe.guide
    assert awe.guide.strip() and len(awe.guide) <= evolution.MAX_GUIDE_CHARS
    assert evolution.evolve(awe, model, "none", questions, {}) is None


def test_a_bank_that_outgrows_the_writers_prompt_budget_loses_view_entries_not_the_run(model, embedder):
    """The MemBuilder assistant bounds each agent prompt (write_prompt_tokens): a bank whose 20-entry views no
    longer fit loses its lowest-ranked view entries, measured with the writer's tokenizer, and still writes."""
    import json as _json

    from membuilder.agents.constructor import MemBuilderPolicy, render_prompt
    from membuilder.llm.base import Sampling
    from membuilder.training.prompts import token_counter

    a = make_assistant("membuilder", model, embedder, reply_tokens=4, write_tokens=8, write_prompt_tokens=600)
    a.reset("u1")
    for i in range(20):
        long = f"Trip note {i}: " + "the user described the long train ride through the mountains and the food " * 4
        for agent in ("episodic", "semantic", "procedural"):
            a.bank.apply(agent, _json.dumps({"operations": [{"action": "ADD", "memory": long}]}))
    a.observe(SESSION, time="2021-03-01 19:00:00", session_id="p0-s0", facts=None)
    assert a.write_log[-1]["prompts_cut"] == 3  # every searchable agent's view was cut; Core's prompt fits

    count = token_counter(model.tokenizer)  # the chat template's own count
    obs = {"session": SESSION[0]["content"], "session_time": "2021-03-01", "core": "",
           "episodic": [e.text for e in a.bank.entries()][:20]}
    policy = MemBuilderPolicy(model, Sampling(max_new_tokens=4), max_prompt_tokens=600)
    full, cut = render_prompt("episodic", obs), policy.prompt("episodic", obs)
    assert count(cut) <= 600 < count(full)
    view = obs["episodic"]  # best-ranked first: the first entries stay, the last go
    assert cut[0] == full[0] and view[0] in cut[1]["content"] and view[-1] not in cut[1]["content"]
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        MemBuilderPolicy(model, max_prompt_tokens=0)


def test_membuilder_writes_a_long_session_window_by_window(model, embedder):
    """window_tokens: a session longer than the window is written in windows of whole turns, each into the memory
    the one before left, under the session's time and id; shorter sessions are written whole, as published."""
    from membuilder.agents.assistant import transcript
    from membuilder.agents.session_windows import session_windows

    long = [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"Turn {i}: we talked about the garden, the new bike and the trip to Lisbon in May."}
            for i in range(6)]
    windows = session_windows(transcript(long), 40, model.count_tokens)
    assert len(windows) >= 3
    a = make_assistant("membuilder", model, embedder, reply_tokens=4, write_tokens=8, window_tokens=40)
    a.reset("u1")
    a.observe(long, time="2021-03-01 19:00:00", session_id="p0-s0", facts=None)
    assert [w["session"] for w in a.write_log] == ["p0-s0"] * len(windows)
    short = [{"role": "user", "content": "I adopted a beagle."}, {"role": "assistant", "content": "Lovely!"}]
    a.observe(short, time="2021-03-02 19:00:00", session_id="p0-s1", facts=None)
    assert [w["session"] for w in a.write_log][len(windows):] == ["p0-s1"]  # a short session: one write
    whole = make_assistant("membuilder", model, embedder, reply_tokens=4, write_tokens=8)
    whole.reset("u1")
    whole.observe(long, time="2021-03-01 19:00:00", session_id="p0-s0", facts=None)
    assert len(whole.write_log) == 1
