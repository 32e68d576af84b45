"""The live memory view of MemBuilder's answers: ``memory_view="live"`` leaves out the entries an
UPDATE replaced, "all" (the published behaviour, the default) keeps them; in the interactive
assistant, in ``memgym eval``'s membuilder system, on the command lines and in resumed runs."""

from __future__ import annotations

import json

import pytest

from membuilder.agents.assistants import make_assistant
from membuilder.llm import load_chat_model
from memgym_env.benchmarks.runner import EvalConfig, evaluate, make_system
from memgym_env.benchmarks.systems import MemBuilder
from memgym_env.cli import build_parser
from memgym_env.conversation import Conversation, Message, QAItem, Session
from memgym_env.interactive.runner import RunConfig, prepare_run

OLD, NEW = "Coffee: espresso", "Coffee: pour-over; previously espresso"
ADD = json.dumps({"operations": [{"action": "ADD", "memory": OLD}]})
UPDATE = json.dumps({"operations": [{"action": "UPDATE", "old_memory": OLD, "new_memory": NEW}]})


@pytest.fixture(scope="module")
def tiny_model(tiny_chat_path):
    return load_chat_model(tiny_chat_path)


def assistant_with_an_update(model, embedder, view: str):
    a = make_assistant("membuilder", model, embedder, memory_view=view)
    a.reset("u1")
    a.bank.apply("semantic", ADD, time="2024-01-01", session="s0")
    a.bank.apply("semantic", UPDATE, time="2024-02-01", session="s1")
    return a


def test_the_live_view_answers_from_the_update_alone_and_all_keeps_the_history(tiny_model, embedder):
    live = assistant_with_an_update(tiny_model, embedder, "live")
    everything = assistant_with_an_update(tiny_model, embedder, "all")
    question, choices = "How does the user make coffee?", ["espresso", "pour-over"]
    for a, shown in ((live, [NEW]), (everything, [OLD, NEW])):
        context = a.context(question, "2024-03-01")
        prompt = a.choice_prompt(question, choices, "2024-03-01")[-1]["content"]
        for text in (context, prompt):  # OLD is no substring of NEW
            assert [t for t in (OLD, NEW) if t in text] == shown
    assert make_assistant("membuilder", tiny_model, embedder).memory_view == "all"  # published behaviour by default


def test_an_unknown_memory_view_is_refused_by_name(tiny_model, embedder, tmp_path):
    with pytest.raises(ValueError, match="memory_view: 'newest'.*all, live"):
        make_assistant("membuilder", tiny_model, embedder, memory_view="newest")
    with pytest.raises(ValueError, match="memory_view"):
        RunConfig(world="w.json", assistant="membuilder", out=str(tmp_path), memory_view="Live")
    with pytest.raises(ValueError, match="memory_view"):
        EvalConfig(benchmark="locomo", data="d.json", out=str(tmp_path), memory_view="none")


def test_both_command_lines_take_memory_view_and_say_what_it_is(capsys):
    parser = build_parser()
    args = parser.parse_args(["evaluate", "--world", "w.json", "--assistant", "membuilder", "--out", "o",
                              "--memory-view", "live"])
    assert args.memory_view == "live"
    assert parser.parse_args(["eval", "--benchmark", "locomo", "--data", "d.json", "--out", "o",
                              "--memory-view", "live"]).memory_view == "live"
    assert parser.parse_args(["evaluate", "--world", "w.json", "--assistant", "rag", "--out", "o"]).memory_view == "all"
    with pytest.raises(SystemExit):
        parser.parse_args(["evaluate", "--world", "w.json", "--assistant", "rag", "--out", "o", "--memory-view", "x"])
    capsys.readouterr()
    for command in ("evaluate", "eval"):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        assert "--memory-view" in capsys.readouterr().out


def test_an_interactive_run_resumes_only_with_its_memory_view(tmp_path):
    world = tmp_path / "world.json"
    world.write_text("{}", encoding="utf-8")  # run.json fingerprints the file's bytes only
    base = {"world": str(world), "assistant": "membuilder", "out": str(tmp_path / "run")}
    meta = prepare_run(RunConfig(**base))
    assert "memory_view" not in meta["assistant_options"]  # the default: folders from before it still resume
    prepare_run(RunConfig(**base))
    with pytest.raises(ValueError, match="different assistant_options"):
        prepare_run(RunConfig(**base, memory_view="live"))
    assert RunConfig(**base, memory_view="live").assistant_options()["memory_view"] == "live"
    assert "memory_view" not in RunConfig(**base | {"assistant": "rag"}, memory_view="live").assistant_options()


def test_an_eval_run_resumes_only_with_its_memory_view(tmp_path):
    base = {"benchmark": "locomo", "data": "d.json", "out": str(tmp_path), "system": "membuilder"}
    assert "memory_view" not in EvalConfig(**base).fingerprint()  # the default: folders from before it still resume
    (tmp_path / "run.json").write_text(json.dumps({"config": EvalConfig(**base).fingerprint(), "invocations": []}))
    with pytest.raises(ValueError, match="memory_view: None there, 'live' now"):
        evaluate(EvalConfig(**base, memory_view="live"), quiet=True)


def test_the_eval_membuilder_system_answers_from_the_live_view(embedder, tmp_path):
    conv = Conversation("c1", [Session("s0", "2024-01-01", [Message("user", "I drink espresso.", meta={"id": "D1:1"})]),
                               Session("s1", "2024-02-01", [Message("user", "Now pour-over.", meta={"id": "D2:1"})])],
                        qa=[QAItem("q1", "How does the user make coffee?", "pour-over", evidence=["D2:1"])])

    def write(bank, session: Session, conv: Conversation) -> None:  # the two sessions' memory writes, fixed
        bank.apply("semantic", ADD if session.id == "s0" else UPDATE, time=session.time, session=session.id)

    shown = {}
    for view in ("all", "live"):
        system = MemBuilder(write, embedder, k=10, live_only=view == "live")
        system.build(conv, tmp_path / view)
        [ctx] = system.contexts(conv, conv.qa)
        shown[view] = [t for t in (OLD, NEW) if t in ctx.memory]
        assert ctx.read is True
    assert shown == {"all": [OLD, NEW], "live": [NEW]}
    cfg = EvalConfig(benchmark="locomo", data="d.json", out=str(tmp_path), system="membuilder", memory_view="live")
    assert make_system(cfg, {"model": None, "embedder": embedder}).live_only is True


def test_write_view_reaches_the_interactive_writers_and_its_run_folder(tiny_model, embedder, tmp_path):
    """``write_view`` (what the memory agents see of their own memory, MemoryGym-v0's setting of the same name)
    travels from the command line to the assistant, and a run folder resumes only with the view it was made in."""
    assert make_assistant("membuilder", tiny_model, embedder).write_live is False  # published: the whole history
    assert make_assistant("membuilder", tiny_model, embedder, write_view="live").write_live is True
    with pytest.raises(ValueError, match="write_view: 'current'"):
        make_assistant("membuilder", tiny_model, embedder, write_view="current")
    with pytest.raises(ValueError, match="write_view"):
        RunConfig(world="w.json", assistant="membuilder", out=str(tmp_path), write_view="Live")
    assert build_parser().parse_args(["evaluate", "--world", "w.json", "--assistant", "membuilder", "--out", "o",
                                      "--write-view", "live"]).write_view == "live"
    world = tmp_path / "world.json"
    world.write_text("{}", encoding="utf-8")
    base = {"world": str(world), "assistant": "membuilder", "out": str(tmp_path / "run")}
    assert "write_view" not in prepare_run(RunConfig(**base))["assistant_options"]
    with pytest.raises(ValueError, match="different assistant_options"):
        prepare_run(RunConfig(**base, write_view="live"))
