"""Told events (``WorldConfig.tell_event: opening``): a change session says the life event the oracle writes down."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from membuilder.memory.grounding import content_words, share_in
from memgym_env.world.config import WorldConfig, load_config
from memgym_env.world.data_json import dumps_world
from memgym_env.world.offline import generate_world
from memgym_env.world.oracle_grounding import oracle_grounding
from memgym_env.world.validate import world_issues

ROOT = Path(__file__).resolve().parents[2]
# The ladder's shape: one round per update session, so under second_round no session tells its event.
SMALL = WorldConfig(num_users=3, num_periods=4, rounds_update=1, wording="varied")


@pytest.fixture(scope="module")
def worlds():
    return {t: generate_world(dataclasses.replace(SMALL, tell_event=t)) for t in ("second_round", "opening")}


def _share(world, agent):
    """The mean share of content words of the oracle's ``agent`` entries that it was given, and their count."""
    gs = [oracle_grounding(user)[agent] for user in world]
    entries = sum(g.entries for g in gs)
    return sum(g.share_sum for g in gs) / entries, entries


def test_second_round_is_the_default_and_an_unknown_place_is_refused():
    assert WorldConfig().tell_event == "second_round"
    with pytest.raises(ValueError, match="field 'tell_event' must be one of"):
        load_config(None, {"tell_event": "never"})


def test_opening_tells_every_event_and_changes_nothing_else(worlds):
    told, untold = worlds["opening"], worlds["second_round"]
    assert world_issues(told) == []
    assert dumps_world(told) == dumps_world(generate_world(dataclasses.replace(SMALL, tell_event="opening")))
    for a, b in zip(untold, told, strict=True):
        assert a.state_schema == b.state_schema and [q.query for q in a.qas] == [q.query for q in b.qas]
        for ra, rb in zip(a.sessions(), b.sessions(), strict=True):
            sa, sb = ra.session, rb.session
            assert (ra.id, sa.session_time, sa.exposed_states, sa.event) == (rb.id, sb.session_time, sb.exposed_states,
                                                                             sb.event)
            assert [t.content for t in sa.messages[1:]] == [t.content for t in sb.messages[1:]]
            if sa.event is None:
                assert sa.messages[0].content == sb.messages[0].content
            else:  # the opening turn: the event's sentence, then the request the untold world opens with
                assert sb.messages[0].content.endswith(" " + sa.messages[0].content)
                event = " ".join(content_words(sa.event) - content_words(a.user_profile.name))
                untold_session = " ".join(t.content for t in sa.messages)
                assert share_in(event, content_words(sb.messages[0].content)) >= 0.8  # "my debts" for "his"
                assert share_in(event, content_words(untold_session)) < 0.8  # the untold session never said it


def test_the_oracle_writes_only_what_was_said_once_events_are_told(worlds):
    told, untold = _share(worlds["opening"], "episodic"), _share(worlds["second_round"], "episodic")
    assert told[1] == untold[1] > 0
    assert told[0] > 0.99  # every word was said or written before, but for the format's "As a result"
    assert untold[0] < 0.85  # a fifth of each Episodic entry names an event nobody mentioned
    assert _share(worlds["opening"], "semantic")[0] > _share(worlds["second_round"], "semantic")[0]
    for user in worlds["opening"]:
        assert all(g.grounded == g.entries for g in oracle_grounding(user).values())


def test_the_told_env_config_builds_its_world_scorer_and_first_batch():
    from membuilder.training.policy_eval import grounding_of
    from memgym_env.construction.actions import noop_action
    from memgym_env.construction.config import ConstructionConfig
    from memgym_env.construction.scoring import SessionScorer

    config = ConstructionConfig.from_yaml(ROOT / "configs/env/construction_cpu_change_told.yaml")
    assert config.world_overrides["tell_event"] == "opening" and config.answer_mode == "stale"
    scorer = SessionScorer(config, [8], max_sessions_per_user=3, pick="every_period")
    keys = scorer.session_keys()
    assert any("p0-" not in k for k in keys)  # sessions with a change, not only the first period's
    expert = grounding_of({k: scorer.expert_action(k) for k in keys}, {k: scorer.observation(k) for k in keys})
    assert expert["all"]["entries"] > 0 and expert["all"]["grounded"] == expert["all"]["entries"]
    for key in keys:
        noop, oracle = scorer.score(key, [noop_action(scorer.core_before(key)), scorer.expert_action(key)])
        assert oracle.task_reward == 1.0 and oracle.reward > noop.reward
