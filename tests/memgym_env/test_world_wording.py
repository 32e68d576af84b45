"""Varied wording (``WorldConfig.wording: varied``): other words, the same world, scored in the world's words."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

from memgym_env.construction.state_values import question_variables, stale_ok
from memgym_env.world.catalog import load_catalog
from memgym_env.world.config import WorldConfig, load_config
from memgym_env.world.data_json import dumps_world, read_world, write_world
from memgym_env.world.offline import generate_world
from memgym_env.world.oracle import expert_steps
from memgym_env.world.session_qa import session_qa
from memgym_env.world.validate import world_issues
from memgym_env.world.wording import load_wording, wording_issues

ROOT = Path(__file__).resolve().parents[2]
SMALL = WorldConfig(num_users=3, num_periods=4, rounds_update=1)


@pytest.fixture(scope="module")
def worlds():
    return {w: generate_world(dataclasses.replace(SMALL, wording=w)) for w in ("fixed", "varied")}


def _structure(user):
    return ([(r.id, r.session.session_time, r.session.exposed_states, r.session.event) for r in user.sessions()],
            user.state_schema, user.user_profile, [(q.query, q.required_info, [c.state for c in q.answer_choices])
                                                   for q in user.qas])


def test_fixed_is_the_default_and_an_unknown_wording_is_refused():
    assert WorldConfig().wording == "fixed"
    with pytest.raises(ValueError, match="field 'wording' must be fixed or varied"):
        load_config(None, {"wording": "loose"})


def test_varied_world_is_deterministic_valid_and_round_trips(worlds, tmp_path):
    varied = worlds["varied"]
    assert dumps_world(varied) == dumps_world(generate_world(dataclasses.replace(SMALL, wording="varied")))
    assert dumps_world(varied) != dumps_world(worlds["fixed"])
    assert world_issues(varied) == []
    write_world(varied, tmp_path / "data.json")
    assert dumps_world(read_world(tmp_path / "data.json")) == dumps_world(varied)


def test_varied_wording_keeps_the_structure_and_changes_every_title_and_text(worlds):
    cat = load_catalog()
    for fixed, varied in zip(worlds["fixed"], worlds["varied"], strict=True):
        assert _structure(fixed) == _structure(varied)
        for var, info in varied.variable_info.items():
            spec = cat.variables[var]
            assert info.title != spec.title
            assert set(info.values) == set(fixed.variable_info[var].values)
            for value, text in info.values.items():
                assert text != spec.values[value].text
                assert text in load_wording().texts[var][value]


def test_each_session_states_the_values_it_reveals_in_the_worlds_words(worlds):
    for user in worlds["varied"]:
        for ref in user.sessions():
            opening = ref.session.messages[0].content
            assert opening == ref.session.query
            for var, value in ref.session.exposed_states.items():
                info = user.variable_info[var]
                assert f"{info.title.lower()}" in opening and info.text(value) in opening, (ref.id, var)


def test_the_oracles_procedural_entries_are_grounded_in_the_session_that_states_them(worlds):
    """A routine's steps are said in the session, so the expert's Procedural entry (which lists them) is written
    from what the writer saw; in the fixed world the steps exist only in the catalog."""
    from membuilder.memory.grounding import GROUNDED_SHARE, grounded_share, written_units
    from membuilder.memory.ops import parse

    shares = {}
    for wording, world in worlds.items():
        shares[wording] = []
        for user in world:
            refs = {r.id: r for r in user.sessions()}
            for step in expert_steps(user):
                parsed = parse("procedural", step.outputs["procedural"])
                session = " ".join(m.content for m in refs[step.session_id].session.messages)
                shares[wording] += [grounded_share(unit, [session]) for unit in written_units(parsed.ops)]
    assert len(shares["varied"]) >= 6
    assert all(s >= GROUNDED_SHARE for s in shares["varied"]), shares["varied"]
    assert min(shares["fixed"]) < GROUNDED_SHARE  # what the change fixed


def test_stale_aware_scoring_reads_the_phrasings_the_world_used(worlds):
    """meta["states"] lists the world's own texts, so the oracle's memory passes the stale-aware check and
    the same memory in the catalog's words fails it wherever a needed value changed."""
    checked = 0
    for wording in ("fixed", "varied"):
        for i, user in enumerate(worlds[wording]):
            catalog_twin = dataclasses.replace(user, variable_info=worlds["fixed"][i].variable_info)
            cores = {s.session_id: s.core_after for s in expert_steps(user)}
            catalog_cores = {s.session_id: s.core_after for s in expert_steps(catalog_twin)}
            for item in session_qa(user):
                for var, state in item.meta["states"].items():
                    info = user.variable_info[var]
                    assert state["phrasings"] == {v: [info.text(v)] for v in state["phrasings"]}
                variables = question_variables(item)
                if not any(v.changed for v in variables):
                    continue
                assert stale_ok(variables, [("core", cores[item.session])]), item.id
                assert stale_ok(variables, [("core", catalog_cores[item.session])]) is (wording == "fixed"), item.id
                checked += wording == "varied"
    assert checked >= 10


def test_the_wording_rules_catch_a_catalog_copy_and_a_history_word():
    words = load_wording()
    assert wording_issues(words, load_catalog()) == []
    texts = {k: dict(v) for k, v in words.texts.items()}
    texts["diet_type"]["vegan"] = ("vegan, no animal products at all", "vegan from birth")
    bad = dataclasses.replace(words, texts=texts)
    issues = wording_issues(bad, load_catalog())
    assert any("is found in the catalog's" in i and "'vegan'" in i for i in issues)
    assert any("history word" in i and "vegan from birth" in i for i in issues)


def test_the_varied_env_config_builds_its_world_scorer_and_first_batch():
    from memgym_env.construction.actions import noop_action
    from memgym_env.construction.config import ConstructionConfig
    from memgym_env.construction.episodes import load_episodes
    from memgym_env.construction.scoring import SessionScorer

    path = ROOT / "configs/env/construction_cpu_change_varied.yaml"
    config = ConstructionConfig.from_yaml(path)
    assert config.world_overrides["wording"] == "varied" and config.answer_mode == "stale"
    episodes = load_episodes(config)
    assert len(episodes) == 16
    first = episodes[0].conversation.sessions[0].render()
    assert re.search(r"(sum it up|notes|summary|in a few words|where I stand|short version)", first)
    scorer = SessionScorer(config, [8], max_sessions_per_user=3, pick="every_period")
    for key in scorer.session_keys():
        noop, oracle = scorer.score(key, [noop_action(scorer.core_before(key)), scorer.expert_action(key)])
        assert oracle.task_reward == 1.0 and oracle.reward > noop.reward


def test_catalog_repeat_bench_on_one_user():
    """The bench's catalog writer equals the oracle under fixed wording and loses its reward under varied."""
    sys.path.insert(0, str(ROOT / "bench"))
    import catalog_repeat

    result = catalog_repeat.run(str(ROOT / "configs/env/construction_cpu_change.yaml"), [9], max_sessions=4)
    fixed, varied = result["wordings"]["fixed"], result["wordings"]["varied"]
    assert fixed["catalog"]["reward"] == fixed["oracle"]["reward"]
    assert varied["oracle"]["task_reward"]["mean"] == 1.0
    assert varied["catalog"]["task_reward"]["mean"] < fixed["catalog"]["task_reward"]["mean"]
    assert varied["catalog"]["grounding"]["grounded_rate"] < varied["oracle"]["grounding"]["grounded_rate"]
    assert "| varied | catalog |" in catalog_repeat.table(result)
