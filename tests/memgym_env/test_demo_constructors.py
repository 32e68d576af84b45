"""`memgym demo` compares the trained and the untrained constructor in the trained policy's own setting."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from membuilder.llm.registry import TRAINED_POLICY
from memgym_env.demo import job as demo
from memgym_env.demo.report import as_records, constructor_section, constructor_table, wrap_whole
from memgym_env.world.user_ranges import parse_users


def test_the_shipped_card_names_its_setting_and_the_default_preset_keeps_it():
    setting = demo.policy_setting(TRAINED_POLICY)
    # the tracks-change ladder's setting (configs/train/ladder_smollm2_cpu.yaml), which the card must name
    assert setting["env_config"] == "configs/env/construction_cpu_change_varied.yaml"
    assert (setting["max_completion_tokens"], setting["max_prompt_tokens"]) == (256, 640)
    assert setting["eval_session_pick"] == "every_period"
    assert not set(parse_users(setting["held_out_users"])) & set(parse_users(setting["train_users"]))
    assert demo.policy_setting(f"transformers:{TRAINED_POLICY}") == setting  # an engine prefix is no other policy
    assert demo.policy_setting("smollm2-135m") is None and demo.policy_setting("/some/local/model") is None
    d = demo.DEFAULT
    assert d.held_out_users * d.held_out_sessions >= 24 and d.held_out_tokens is None
    assert d.held_out_users <= len(parse_users(setting["held_out_users"]))
    assert demo.setting_config(setting).world_overrides["num_users"] == 16


def test_the_verdict_says_yes_only_for_an_interval_above_zero():
    assert demo.verdict({"mean": 0.1, "ci": [0.02, 0.2], "n": 24}) == "trained > untrained: yes (interval above zero)"
    held = demo.verdict({"mean": 0.01, "ci": [-0.02, 0.05], "n": 24})
    assert held.startswith("trained > untrained: not shown:") and "+0.010" in held and "[-0.020, 0.050]" in held
    assert "24 sessions" in held and "zero inside" in held
    assert "below zero" in demo.verdict({"mean": -0.1, "ci": [-0.2, -0.05], "n": 24})


@pytest.fixture(scope="module")
def tiny_chat():
    from membuilder.llm.transformers_backend import TransformersChatModel
    from membuilder.training.tiny import byte_tokenizer, tiny_llama

    tok = byte_tokenizer()
    return TransformersChatModel(model=tiny_llama(tok), tokenizer=tok, name="tiny")


def test_both_constructors_write_the_same_held_out_sessions_and_are_compared_by_session(tiny_chat):
    # The card's world config, made small; two tiny random models stand for the constructors.
    setting = {"env_config": "configs/env/construction_cpu.yaml",
               "env_overrides": {"world_overrides": {"num_users": 2, "num_periods": 2, "rounds_update": 1}},
               "train_users": "0", "held_out_users": "1", "max_completion_tokens": 8, "max_prompt_tokens": 96}
    sizes = replace(demo.QUICK, held_out_users=1, held_out_sessions=3, held_out_tokens=None)
    with demo.Progress([]) as progress:
        out = demo.compare_constructors(setting, sizes, {"untrained": ("tiny-a", tiny_chat),
                                                         "trained": ("tiny-b", tiny_chat)}, progress)
    keys = out["session_keys"]
    assert len(keys) == 3 and len(out["users"]) == 1 and out["max_new_tokens"] == 8
    for label in ("untrained", "trained"):
        c = out["constructors"][label]
        assert c["n"] == 3 and list(c["session_rewards"]) == keys and len(c["ci"]) == 2
        assert set(c["valid_rate"]) == {"core", "episodic", "semantic", "procedural"} and "entries" in c["grounding"]
    assert out["oracle"]["n"] == out["noop"]["n"] == 3
    assert out["oracle"]["mean_reward"] >= out["noop"]["mean_reward"]
    # The same model on both sides: every session's difference is zero, and the verdict says not shown.
    assert out["difference"] == {"mean": 0.0, "ci": [0.0, 0.0], "n": 3}
    assert out["verdict"].startswith("trained > untrained: not shown:")
    json.dumps(out)  # report.json holds it as it is


def comparison_fixture() -> dict:
    built = {label: {"spec": spec, "n": 24, "mean_reward": r, "ci": [r - 0.05, r + 0.05],
                     "valid_rate": {"core": 0.958333, "episodic": 1.0, "semantic": 0.5, "procedural": 0.0},
                     "grounding": {"entries": 123, "grounded": 100, "grounded_rate": 0.813, "mean_share": 0.9}}
             for label, spec, r in (("untrained", "smollm2-135m", 0.012), ("trained", TRAINED_POLICY, 0.117))}
    return {"setting": demo.policy_setting(TRAINED_POLICY), "users": ["u1", "u2", "u3", "u4"],
            "session_keys": [f"u/{i}" for i in range(24)], "max_new_tokens": 256, "card_max_completion_tokens": 256,
            "max_prompt_tokens": 640, "constructors": built,
            "noop": {"mean_reward": 0.0, "ci": [0.0, 0.0], "n": 24},
            "oracle": {"mean_reward": 0.4567, "ci": [0.38, 0.53], "n": 24},
            "difference": {"mean": 0.105, "ci": [0.05, 0.16], "n": 24},
            "verdict": "trained > untrained: yes (interval above zero)"}


def test_the_constructor_rows_stay_whole_at_80_columns_and_in_a_log():
    comparison = comparison_fixture()
    results = {name: {"overall": {"accuracy": 0.5, "memory_score": 0.25, "write": 0.375},
                      "per_user": {"accuracy": [[0.5, None, 1.0], [0.0, 0.5, 0.5]]}}
               for name in ("membuilder", demo.UNTRAINED)}
    for played in ({}, results):
        rows = constructor_table(comparison, played)
        text = as_records(rows, width=80)
        assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
        names = [r[0] for r in rows[1:]]
        assert names == ["smollm2-135m (untrained)", f"{TRAINED_POLICY} (trained)",
                         "trained - untrained (paired by session)", "no-op (writes nothing)",
                         "oracle (the world's ideal writes)"]
        for row in rows[1:]:
            assert row[0] in text.splitlines()
            block = as_records([rows[0], row], width=80)
            assert block in text
            for col, value in zip(rows[0][1:], row[1:], strict=True):
                assert (f"{col} {value}" in block) if value else (f" {col} " not in block + " ")  # whole, or left out
    assert "mean reward +0.105 · 95% CI [0.050, 0.160]" in text and "grounded 0.813 of 123 entries" in text
    assert "interactive cells 5 (2 users)" in text
    md = "\n".join(constructor_section({"model": "smollm2-135m", "constructor": TRAINED_POLICY,
                                        "untrained_constructor": "smollm2-135m"}, comparison, results))
    assert "24 held-out sessions" in md and comparison["setting"]["env_config"] in md and "256 tokens" in md
    assert "**trained > untrained: yes (interval above zero)**" in md


def test_the_verdict_wraps_at_80_columns_without_splitting_its_interval():
    sentence = demo.verdict({"mean": 0.0123, "ci": [-0.0456, 0.0789], "n": 24})
    lines = wrap_whole(sentence, 80).splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 80 and " ".join(lines) == sentence
    assert any("[-0.046, 0.079]" in line for line in lines)


def test_workers_share_the_generation_batch_by_batch_and_match_one_serial_run():
    # Two spawned processes take whole batches of either constructor as they come free; every output is made
    # in the same batch as in one serial call, so the comparison is the same as the serial one.
    import torch

    from membuilder.llm import load_chat_model

    setting = {"env_config": "configs/env/construction_cpu.yaml",
               "env_overrides": {"world_overrides": {"num_users": 2, "num_periods": 2, "rounds_update": 1}},
               "train_users": "0", "held_out_users": "1", "max_completion_tokens": 6, "max_prompt_tokens": 160}
    sizes = replace(demo.QUICK, held_out_users=1, held_out_sessions=5, held_out_tokens=None)
    threads = torch.get_num_threads()
    try:
        writers = {label: (spec, load_chat_model(spec, threads=1))
                   for label, spec in (("untrained", "smollm2-135m"), ("trained", TRAINED_POLICY))}
        with demo.Progress([]) as progress:
            serial = demo.compare_constructors(setting, sizes, writers, progress, workers=1)
            shared = demo.compare_constructors(setting, sizes, writers, progress, workers=2)
    finally:
        torch.set_num_threads(threads)
    assert len(shared["session_keys"]) == 5 and 4 * 5 > demo.BATCH  # more than one batch per constructor
    for label in ("untrained", "trained"):
        assert shared["constructors"][label]["outputs"] == serial["constructors"][label]["outputs"]
        assert shared["constructors"][label]["session_rewards"] == serial["constructors"][label]["session_rewards"]
    assert shared["difference"] == serial["difference"] and shared["verdict"] == serial["verdict"]
