"""AWE as AMemGym publishes it: facts written every 2 messages with ADD / UPDATE / DELETE / NONE
decided against the most similar stored memories, and a 4-message buffer kept across sessions.

The chat model is a scripted stand-in (each reply is set by the test); the embedder is the real
all-MiniLM, so retrieval of "similar memories" is the real one."""

from __future__ import annotations

import json

import pytest

from membuilder.agents.assistants import make_assistant
from membuilder.agents.awe import parse_events
from membuilder.llm.base import Completion


class ScriptedModel:
    """Replies to a fact-listing prompt with the next of ``facts``, to a decision prompt with the
    next of ``decisions``, and "Sure." to anything else; records every prompt it gets."""

    def __init__(self, facts=(), decisions=()):
        self.facts, self.decisions, self.prompts = list(facts), list(decisions), []

    def generate(self, prompts, sampling=None, **kw):
        out = []
        for conv in prompts:
            text = conv[-1]["content"]
            self.prompts.append(text)
            if "New facts" in text:
                out.append(Completion(text=self.decisions.pop(0)))
            elif "list the facts worth remembering" in text:
                out.append(Completion(text=self.facts.pop(0)))
            else:
                out.append(Completion(text="Sure."))
        return out

    def count_tokens(self, text):
        return len(text.split())


def turn(user, reply="Noted."):
    return [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]


def awe(model, embedder):
    a = make_assistant("awe", model, embedder)
    a.reset("u1")
    return a


def decision(*events):
    return json.dumps({"memory": [dict(zip(("id", "event", "text"), e, strict=False)) for e in events]})


def test_published_parameters_are_the_defaults(embedder):
    a = awe(ScriptedModel(), embedder)
    assert (a.messages_per_write, a.short_term, a.top_k) == (2, 4, 30)


def test_an_update_replaces_the_stored_memory(embedder):
    model = ScriptedModel(facts=["- Drives to work", "- Cycles to work now"],
                          decisions=[decision(("0", "UPDATE", "Cycles to work (drove before)"))])
    a = awe(model, embedder)
    a.observe(turn("I drive to work."), time="2021-01-01", session_id="s0")
    assert a.index.texts == ["[2021-01-01] Drives to work"]  # nothing stored yet: added without a decision
    a.observe(turn("I sold the car, I cycle to work now."), time="2021-04-01", session_id="s1")
    assert a.index.texts == ["[2021-04-01] Cycles to work (drove before)"]
    assert "0: Drives to work" in model.prompts[-1]  # the decision saw the similar stored memory
    assert a.write_log["update"] == 1 and len(a.index.vectors) == 1


def test_a_delete_removes_the_stored_memory_and_an_add_keeps_the_others(embedder):
    model = ScriptedModel(facts=["- Has a cat called Tom\n- Lives in Porto", "- Gave the cat away"],
                          decisions=[decision(("0", "DELETE"), ("1", "NONE"), ("new", "ADD", "Has no pets"))])
    a = awe(model, embedder)
    a.observe(turn("My cat Tom and I live in Porto."), time="2021-01-01", session_id="s0")
    a.observe(turn("I gave Tom to my sister."), time="2021-04-01", session_id="s1")
    shown = model.prompts[-1].split("Stored memories (id: text):\n")[1].split("\n\n")[0].splitlines()
    assert shown[0] == "0: Has a cat called Tom"  # the most similar memory is id 0
    assert "[2021-01-01] Has a cat called Tom" not in a.index.texts
    assert "[2021-04-01] Has no pets" in a.index.texts and "[2021-01-01] Lives in Porto" in a.index.texts
    assert len(a.index.texts) == len(a.index.vectors) == 2


def test_an_unparseable_decision_adds_the_facts(embedder):
    model = ScriptedModel(facts=["- Drives to work", "- Cycles to work"], decisions=["I think UPDATE"])
    a = awe(model, embedder)
    a.observe(turn("I drive."), time="2021-01-01", session_id="s0")
    a.observe(turn("I cycle."), time="2021-04-01", session_id="s1")
    assert a.index.texts == ["[2021-01-01] Drives to work", "[2021-04-01] Cycles to work"]
    assert a.write_log["unparsed_decisions"] == 1
    assert parse_events('{"memory": [{"id": "0", "event": "merge"}]}') == []


def test_on_policy_each_two_messages_are_written_before_the_session_ends(embedder):
    model = ScriptedModel(facts=["- Lives in Porto", "NONE"])
    a = awe(model, embedder)
    a.act("[Current Time: 2021-01-01 19:00] I live in Porto.", "2021-01-01 19:00")
    assert a.index.texts == ["[2021-01-01 19:00] Lives in Porto"]  # written after the first user turn and reply
    a.act("What should I visit?", "2021-01-01 19:00")
    a.observe(list(a.session), time="2021-01-01 19:00", session_id="s0")
    assert a.write_log["windows"] == 2  # the session's second window, once: not again at session end


def test_the_four_message_buffer_persists_across_sessions_and_is_shown_when_answering(embedder, tmp_path):
    model = ScriptedModel(facts=["NONE"] * 4)
    a = awe(model, embedder)
    a.observe(turn("one", "r1") + turn("two", "r2"), time="2021-01-01", session_id="s0")
    a.observe(turn("three", "r3"), time="2021-02-01", session_id="s1")
    assert [m["content"] for m in a.session_view()] == ["two", "r2", "three", "r3"]
    prompt = a.choice_prompt("Which city?", ["Porto", "Lisbon"], "2021-03-01")[-1]["content"]
    assert "The latest messages:\nUser: two\nAssistant: r2\nUser: three\nAssistant: r3" in prompt
    a.save_state(tmp_path)
    b = make_assistant("awe", model, embedder)
    b.load_state(tmp_path)
    assert b.session_view() == a.session_view()


@pytest.mark.parametrize("bad", [{"short_term": -1}, {"similar_k": 0}])
def test_bad_parameters_are_refused(embedder, bad):
    with pytest.raises(ValueError, match="awe"):
        make_assistant("awe", ScriptedModel(), embedder, **bad)
