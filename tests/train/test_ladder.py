"""The training ladder end to end on a tiny random model: every stage, held-out users, intervals,
curves, the interactive memory score, the exported adapter, and resume."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

pytest.importorskip("trl")

from membuilder.llm.vllm_backend import cpu_engine_dtype  # noqa: E402
from membuilder.memory.ops import AGENTS  # noqa: E402
from membuilder.plumbing.stats import bootstrap_ci, separated  # noqa: E402
from membuilder.training.tiny import byte_tokenizer, tiny_llama  # noqa: E402
from memgym_env.world import generate_world, load_config  # noqa: E402
from train.ladder import (
    machine,  # noqa: E402
    sweep,  # noqa: E402
)
from train.ladder import run as ladder  # noqa: E402
from train.ladder.curve_callback import CurveCallback  # noqa: E402
from train.ladder.report import (  # noqa: E402
    paired_difference,
    plot_curves,
    progress_lines,
    recipe_command,
    seed_mean,
    verdicts,
)
from train.ladder.run import _train_seconds  # noqa: E402
from train.ladder.settings import parse_args  # noqa: E402


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    tok = byte_tokenizer()
    tiny_llama(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _rl(**fields) -> list[str]:
    """``--set`` changes of both RL stages alike."""
    return [f"stages.{stage}.overrides.{k}={v}" for stage in ("adrpo", "grpo", "adrpo_retrieval")
            for k, v in fields.items()]


def _argv(tiny_path, tmp_path):
    return ["--config", "configs/train/ladder_smollm2_cpu.yaml", "--model_name_or_path", tiny_path,
            "--env_overrides", json.dumps({"world_overrides": WORLD}),
            "--train_users", "0-1", "--held_out_users", "3", "--eval_sessions_per_user", "3",
            "--seeds", "0", "1", "--curve_every", "1", "--curve_sessions", "2", "--max_completion_tokens", "8",
            "--eval_engine", "transformers", "--grounding_sessions", "2",
            "--memory_score_world", '{"num_users": 1, "num_periods": 0, "seed": 7}',
            "--adapter_out", str(tmp_path / "shipped"),
            "--work_dir", str(tmp_path / "work"), "--results_dir", str(tmp_path / "results"),
            "--set", "stages.sft.overrides.max_sessions_per_user=1",
            # the trainer's own generation: vLLM cannot load the tiny model, and tests/engine_vllm runs the ladder's
            # RL stage with the engine
            *_rl(max_sessions_per_user=1, max_steps=2, num_generations=2, per_device_train_batch_size=2,
                 sessions_per_step=1, use_vllm="false")]


def timeless(rows):
    """Rows without the seconds an evaluation took (an evaluation made again takes other seconds)."""
    return [{k: v for k, v in r.items() if k not in ("eval_seconds", "memory_score_seconds")} for r in rows]


# The shipped ladder's world (tracks_change reward, varied wording), small
WORLD = {"num_users": 4, "num_periods": 1, "rounds_update": 1, "wording": "varied"}


def test_ladder_writes_every_stage_with_intervals_curves_and_resumes(tiny_path, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMGYM_TORCH_THREADS", "1")
    rows = ladder.main(_argv(tiny_path, tmp_path))
    saved = json.loads((tmp_path / "results" / "ladder.json").read_text())
    assert saved == json.loads(json.dumps(rows))
    # the published attribution rule runs the first seed only (stage_seeds)
    assert [(r["stage"], r["seed"]) for r in saved] == [
        ("base", 0), ("sft", 0), ("adrpo", 0), ("grpo", 0), ("adrpo_retrieval", 0), ("adrpo", 1), ("grpo", 1)]
    world = generate_world(load_config("configs/env/base.yaml", overrides=WORLD))
    held_out = {world[3].id}
    for r in saved:
        assert set(r["valid_rate"]) == set(AGENTS) and set(r["cut_rate"]) == set(AGENTS)
        assert set(r["held_out_users"]) == held_out and r["held_out_sessions"] == 3
        lo, hi = r["reward_evidence_ci"]
        assert 0.0 <= lo <= r["reward_evidence"] <= hi <= 1.0
        assert r["reward_choice"] is None and r["eval_engine"] == "transformers" and r["reward_mode"] == "stale"
        # which held-out sessions needed an edit, what the stage wrote there, and how grounded its entries were
        assert set(r["session_changed"]) == set(r["session_reward_evidence"])
        if any(r["session_changed"].values()):
            n_changed = sum(r["session_changed"].values())
            assert all(a["outputs"] == n_changed for a in r["held_out_actions_changed"].values())
        # each agent's edits held against the expert's: every session is one the expert edits that memory on or not
        for e in r["held_out_edits_vs_expert"].values():
            assert e["needed"] + e["not_needed"] == r["held_out_sessions"]
            assert 0 <= e["landed"] <= e["edited"] <= e["needed"] and 0 <= e["false"] <= e["not_needed"]
        assert r["grounding"]["all"]["entries"] >= r["grounding"]["all"]["grounded"] >= 0
        # every trained stage names the machine it trained on
        assert (r["machines"] is None) == (r["stage"] == "base")
        # and every evaluation made here names this machine, where the interactive figures depend on it
        assert r["evaluated_on"]["held_out"] == r["evaluated_on"]["interactive"] == machine.evaluating()
        assert r["memory_questions"] > 0 and 0.0 <= r["memory_accuracy"] <= 1.0 and r["memory_upper_bound"] is not None
        # every question's outcome, so two stages pair question by question
        assert len(r["memory_correct"]) == r["memory_questions"]
        assert sum(r["memory_correct"].values()) / r["memory_questions"] == pytest.approx(r["memory_accuracy"])
        assert set(r["session_noop_evidence"]) == set(r["session_reward_evidence"])
        # and on a real dialogue no stage trained on (LoCoMo conv-26's first sessions): base, SFT and the first
        # seed's RL stages (grounding_seeds), further seeds skip it
        if r["seed"] == 1:
            assert r["real_grounding"] is None
        else:
            assert r["real_grounding"]["sessions"] == 2 and set(r["real_grounding"]["valid_rate"]) == set(AGENTS)
            # ... each session longer than the training world's written in windows of whole turns
            assert r["real_grounding"]["window_tokens"] == 160 and r["real_grounding"]["outputs"] > 2
        # the held-out set's no-op and oracle rewards, and the stage's gain over no-op against the oracle's
        assert r["held_out_pick"] == "every_period"
        assert r["noop_evidence"] == saved[0]["noop_evidence"] and r["oracle_evidence"] == saved[0]["oracle_evidence"]
        assert r["gain_evidence"] == pytest.approx(r["reward_evidence"] - r["noop_evidence"])
        assert r["oracle_gain_evidence"] == pytest.approx(r["oracle_evidence"] - r["noop_evidence"])
        assert len(r["gain_evidence_ci"]) == 2
        assert sum(p["sessions"] for p in r["per_period_evidence"].values()) == 3
    # the interactive memory score ran the MemBuilder assistant once per stage (a random tiny model's
    # score is mostly undefined: its upper bound is no better than chance)
    for label in ("base", "sft", "adrpo seed 0", "grpo seed 1"):
        results = json.loads((tmp_path / "work" / "interactive" / f"{label}.transformers.w8" / "results.json").read_text())
        assert results["assistant"] == "membuilder" and len(results["users"]) == 1
    for r in saved:
        if r["stage"] in ("grpo", "adrpo", "adrpo_retrieval"):
            assert r["time_split"]["steps"] == 2 and r["time_split"]["generation_s"] > 0
            assert r["attribution"] == ("retrieval" if r["stage"] == "adrpo_retrieval" else "evidence")
            # train reward at each of the 2 steps; held-out reward at 0 (SFT), 1 (callback) and 2 (final eval)
            assert [p["step"] for p in r["curve"]] == [0, 1, 2]
            assert [p["train_reward"] is not None for p in r["curve"]] == [False, True, True]
            assert all(p["held_out_reward"] is not None for p in r["curve"])
            # the learning signal read off the run's rollout log: 2 steps of one session, 4 agents x G = 2
            signal = r["train_signal"]
            assert signal["steps"] == 2 and signal["window"] == 1 and signal["agent_prompts"] == 2 * 4
            train = {p["step"]: p["train_reward"] for p in r["curve"]}
            assert signal["first"]["mean"] == pytest.approx(train[1], abs=1e-4)
            assert signal["last"]["mean"] == pytest.approx(train[2], abs=1e-4)
            # what the run's rollouts wrote: 2 steps, G = 2 rollouts of each agent a step
            actions = r["train_actions"]
            assert actions["steps"] == 2 and actions["agents"]["semantic"]["first"]["rollouts"] == 2
        else:
            assert r["train_signal"] is None and r["train_actions"] is None
        # every stage's held-out outputs by kind of operation
        assert all(a["outputs"] == 3 for a in r["held_out_actions"].values())
    assert saved[0]["held_out_actions"]["core"]["shares"]["invalid"] == 1.0  # the base tiny model writes no JSON
    # the tiny model cannot write JSON: it runs every output to the token limit
    assert saved[0]["cut_rate"] == {a: 1.0 for a in AGENTS}
    for name in ("ladder.png", "ladder_curves.png", "ladder_actions.png"):
        assert (tmp_path / "results" / name).stat().st_size > 10_000
    md = (tmp_path / "results" / "ladder.md").read_text()
    assert "| adrpo | 1 |" in md and "SFT above base" in md
    assert "Writing nothing scores" in md and "3 of each user spread over every period" in md
    assert "- ADRPO (alpha 4) over seeds 0, 1 (seed 0 " in md and "- GRPO (alpha 1) over seeds 0, 1 (seed 0 " in md
    assert [r["alpha"] for r in saved] == [None, None, 4.0, 1.0, 4.0, 4.0, 1.0]
    summary = json.loads((tmp_path / "results" / "ladder_summary.json").read_text())
    assert summary and "Training and evaluation time" in md
    assert "Learning signal" in md and "GRPO seed 1, train reward over the first 1 of 2 steps" in md
    # the seed's two runs drew the same sessions, so their train rewards pair up step by step
    assert "GRPO seed 0 - ADRPO seed 0, train reward paired by step (the same sessions)" in md
    assert "GRPO seed 1 - ADRPO seed 1, train reward paired by step" in md
    assert "What the policies write" in md and "- SFT, 3 held-out outputs per agent: core " in md
    assert "- GRPO seed 1, sampled rollouts, the first 1 of 2 steps -> the last 1" in md
    for r in saved:
        if r["stage"] == "grpo":  # the pairs, step by step, as the curves' third panel draws them
            assert [p["step"] for p in r["train_vs_adrpo"]["per_step"]] == [1, 2]
    assert "Oracle outputs longer than the 8-token completion limit: train 2 sessions: core 2" in md
    # SFT never saw the held-out user's sessions; RL continued the SFT adapter
    sft_rows = [json.loads(x) for x in (tmp_path / "work" / "sft" / "sft_rows.jsonl").read_text().splitlines()]
    assert sft_rows and {r["session_key"].split("/")[0] for r in sft_rows} == {world[0].id, world[1].id}
    from safetensors.torch import load_file

    sft_w = load_file(tmp_path / "work" / "sft" / "policy" / "adapter" / "adapter_model.safetensors")
    rl_w = load_file(tmp_path / "work" / "seed0" / "adrpo" / "policy" / "adapter" / "adapter_model.safetensors")
    assert sft_w.keys() == rl_w.keys()
    # the shipped adapter: the first seed of the stage with the best held-out reward pooled over seeds, in
    # bfloat16, with a card saying which, why and the setting it was trained in
    import torch

    pooled = ladder.pooled_rewards(saved)
    best = max(pooled, key=lambda s: (pooled[s], -["sft", "adrpo", "grpo", "adrpo_retrieval"].index(s)))
    folder = tmp_path / "work" / ("sft" if best == "sft" else f"seed0/{best}")
    best_w = load_file(folder / "policy" / "adapter" / "adapter_model.safetensors")
    shipped = load_file(tmp_path / "shipped" / "adapter_model.safetensors")
    assert shipped.keys() == rl_w.keys() and all(v.dtype == torch.bfloat16 for v in shipped.values())
    assert all(torch.equal(shipped[k], best_w[k].to(torch.bfloat16)) for k in best_w)
    card = json.loads((tmp_path / "shipped" / "card.json").read_text())
    assert (card["stage"], card["seed"], card["pooled"]) == (best, 0, pooled) and best in card["why"]
    assert card["setting"]["env_config"] == "configs/env/construction_cpu_change_varied.yaml"
    assert (card["setting"]["max_completion_tokens"], card["setting"]["max_prompt_tokens"]) == (8, 640)
    assert card["setting"]["write_window_tokens"] == 160  # how `memgym evaluate` writes a longer session with it
    first = next(r for r in saved if r["stage"] == best)
    assert card["held_out"]["reward_evidence"] == first["reward_evidence"]
    assert card["command"].startswith("python -m train.ladder --config configs/train/ladder_smollm2_cpu.yaml")
    # the recipe, not this machine's folders
    assert "--work_dir" not in card["command"] and "--adapter_out" not in card["command"]
    assert "work_dir" not in card["config"] and card["config"]["stages"]["adrpo"]["overrides"]["max_steps"] == 2
    assert "--results_dir" not in (tmp_path / "results" / "ladder.md").read_text()

    # a rerun resumes: no stage is trained or evaluated again
    done = [tmp_path / "work" / "seed1" / "grpo" / "policy" / "merged", *(tmp_path / "work" / "eval").glob("*.json")]
    stamps = [p.stat().st_mtime_ns for p in done]
    again = ladder.main(_argv(tiny_path, tmp_path))
    assert again == rows and [p.stat().st_mtime_ns for p in done] == stamps
    # every evaluation names the weights it was made of; a stage whose adapter came out otherwise (trained again
    # on a machine that lost it) is judged again, and only that stage
    made_of = {p.name: json.loads(p.read_text())["policy_weights"] for p in (tmp_path / "work" / "eval").glob("*.json")}
    assert made_of["base.transformers.json"] == f"model:{tiny_path}"
    assert made_of["grpo-1.transformers.json"] == made_of["grpo-1-memory.transformers.json"]
    assert made_of["grpo-1.transformers.json"].startswith("sha256:")
    from safetensors.torch import load_file, save_file

    retrained = tmp_path / "work" / "seed1" / "grpo" / "policy"
    weights = load_file(retrained / "adapter" / "adapter_model.safetensors")
    save_file({k: v + 0.5 if i == 0 else v for i, (k, v) in enumerate(weights.items())},
              retrained / "adapter" / "adapter_model.safetensors", metadata={"format": "pt"})
    shutil.rmtree(retrained / "merged")
    ladder.main(_argv(tiny_path, tmp_path))
    grpo_eval = tmp_path / "work" / "eval" / "grpo-1.transformers.json"
    assert json.loads(grpo_eval.read_text())["policy_weights"] not in (None, made_of["grpo-1.transformers.json"])
    assert [p.stat().st_mtime_ns for p in done[1:] if not p.name.startswith("grpo-1")] == \
        [s for p, s in zip(done[1:], stamps[1:]) if not p.name.startswith("grpo-1")]
    save_file(weights, retrained / "adapter" / "adapter_model.safetensors", metadata={"format": "pt"})
    shutil.rmtree(retrained / "merged")
    assert timeless(ladder.main(_argv(tiny_path, tmp_path))) == timeless(rows)  # the first weights, judged again
    done = [tmp_path / "work" / "seed1" / "grpo" / "policy" / "merged", *(tmp_path / "work" / "eval").glob("*.json")]
    stamps = [p.stat().st_mtime_ns for p in done]
    # a memory score cached under other writing settings (an older ladder's) is made again, the rest is kept
    stale = tmp_path / "work" / "eval" / "base-memory.transformers.json"
    cached = json.loads(stale.read_text())
    assert cached["memory_settings"] == {"write_tokens": 8, "write_prompt_tokens": 2040}
    stale.write_text(json.dumps({**cached, "memory_settings": {"write_tokens": 128, "write_prompt_tokens": 3840}}))
    again = ladder.main(_argv(tiny_path, tmp_path))
    assert timeless(again) == timeless(rows) and json.loads(stale.read_text())["memory_settings"]["write_tokens"] == 8
    assert [p.stat().st_mtime_ns for p in done if p != stale] == [s for p, s in zip(done, stamps) if p != stale]
    # an evaluation cached under another session pick (an older ladder's took each user's first sessions) is made
    # again; one cached before evaluations held the no-op and oracle rewards gets them without generating again
    base_eval = tmp_path / "work" / "eval" / "base.transformers.json"
    cached = json.loads(base_eval.read_text())
    assert cached["session_pick"] == "every_period" and cached["noop_reward"]["evidence"] == rows[0]["noop_evidence"]
    base_eval.write_text(json.dumps({**cached, "session_pick": "first"}))
    sft_eval = tmp_path / "work" / "eval" / "sft.transformers.json"
    older = {k: v for k, v in json.loads(sft_eval.read_text()).items()
             if k not in ("noop_reward", "oracle_reward", "gain", "oracle_gain", "session_noop", "session_oracle")}
    sft_eval.write_text(json.dumps(older))
    again = ladder.main(_argv(tiny_path, tmp_path))

    assert timeless(again) == timeless(rows) and json.loads(base_eval.read_text())["session_pick"] == "every_period"
    assert "noop_reward" not in json.loads(sft_eval.read_text())  # filled in, not generated again
    # held-out grounding cached under the older rule (the session's time not among what the writer was shown) is
    # read again off the cached outputs, generating nothing
    made = json.loads(sft_eval.read_text())
    sft_eval.write_text(json.dumps({**{k: v for k, v in made.items() if k != "grounding_rule"},
                                    "grounding": {"all": {"entries": -1}}}))
    assert timeless(ladder.main(_argv(tiny_path, tmp_path))) == timeless(again)
    regrounded = json.loads(sft_eval.read_text())
    assert regrounded["grounding_rule"] == 2 and regrounded["grounding"] == made["grounding"]
    assert regrounded["outputs"] == made["outputs"]
    # a memory score cached before it kept each question's outcome gets them from its run folder, answering nothing
    memory_cache = tmp_path / "work" / "eval" / "sft-memory.transformers.json"
    made = json.loads(memory_cache.read_text())
    memory_cache.write_text(json.dumps({k: v for k, v in made.items() if k != "memory_correct"}))
    assert timeless(ladder.main(_argv(tiny_path, tmp_path))) == timeless(again)
    assert json.loads(memory_cache.read_text())["memory_correct"] == made["memory_correct"]
    rows = again  # the base row's evaluation time is the remade evaluation's

    # a work folder carried to a machine that keeps no files (results/ladder-change/work) holds each stage's adapter,
    # naming the ladder's base model, and its evaluations, not the merged weights: an evaluation made again there
    # (here the memory score, whose MemBuilder writer loads the stage by path) merges the adapter anew and scores
    # what it scored before
    sft_policy = tmp_path / "work" / "sft" / "policy"
    for adapter in (tmp_path / "work").glob("**/policy/adapter"):
        assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == tiny_path
    shutil.rmtree(sft_policy / "merged")
    sft_eval.unlink()
    (tmp_path / "work" / "eval" / "sft-memory.transformers.json").unlink()  # the interactive writer loads merged weights
    again = ladder.main(_argv(tiny_path, tmp_path))
    assert (sft_policy / "merged" / "config.json").exists() and timeless(again) == timeless(rows)
    rows = again  # the SFT row's evaluation times are the remade evaluations'

    # an RL ablation (ADRPO with alpha 2, no GRPO) takes this ladder's SFT stage and evaluations instead of
    # making them again
    work2 = tmp_path / "alpha2"
    ablation = ladder.main([*_argv(tiny_path, tmp_path), "--seeds", "0", "--rl_stages", "adrpo",
                            "--set", "stages.adrpo.overrides.env_overrides.alpha=2", "stages.adrpo.overrides.max_steps=1",
                            "--curve_every", "0", "--adapter_out", "null", "--sft_from",
                            str(tmp_path / "work"), "--work_dir", str(work2), "--results_dir", str(tmp_path / "r2")])
    assert [(r["stage"], r["alpha"]) for r in ablation] == [("base", None), ("sft", None), ("adrpo", 2.0)]
    assert ablation[:2] == rows[:2]
    for name in ("sft/policy/adapter/adapter_model.safetensors", "sft/sft_rows.jsonl", "eval/sft.transformers.json",
                 "eval/base-memory.transformers.json"):
        a, b = tmp_path / "work" / name, work2 / name
        assert b.read_bytes() == a.read_bytes() and b.stat().st_mtime_ns == a.stat().st_mtime_ns  # copied, not made
    assert not (work2 / "seed0" / "grpo").exists() and not (work2 / "seed1").exists()
    md = (tmp_path / "r2" / "ladder.md").read_text()
    assert "ADRPO (alpha 2) seed 0 above SFT" in md and "--sft_from" not in md  # the recipe, not where SFT came from
    assert json.loads((tmp_path / "shipped" / "card.json").read_text()) == card  # adapter_out null
    shipped_config = json.loads((tmp_path / "shipped" / "card.json").read_text())["config"]
    assert shipped_config["stages"]["adrpo"]["overrides"]["env_overrides"]["alpha"] == 4.0

    # a sweep of RL settings runs each point as such an ablation and tables them against SFT, judged on the
    # held-out reward alone: no interactive score or grounding on conv-26 for its RL run, and the SFT stage's,
    # copied from the ladder, left as they were
    flags = _argv(tiny_path, tmp_path)[2:]  # the ladder's flags but --config, and its grounding left to the sweep
    at = flags.index("--grounding_sessions")
    points = sweep.main(["--sft_from", str(tmp_path / "work"), "--grid", "learning_rate=1e-3,1e-5", "--steps", "1",
                         "--work_root", str(tmp_path / "sweep"), "--out", str(tmp_path / "sweep-results"),
                         "--ladder_args", *flags[:at], *flags[at + 2:]])
    assert [p["name"] for p in points] == ["learning_rate0.001", "learning_rate1e-05"]
    for p in points:
        assert p["vs_sft"]["n"] == 3 and p["sft_reward"] == rows[1]["reward_evidence"]
        stage = yaml.safe_load((tmp_path / "sweep" / p["name"] / "seed0" / "grpo" / "stage.yaml").read_text())
        assert (stage["learning_rate"], stage["max_steps"]) == (p["learning_rate"], 1)
        point_rows = json.loads((tmp_path / "sweep-results" / p["name"] / "ladder.json").read_text())
        rl_row = next(r for r in point_rows if r["stage"] == "grpo")
        assert rl_row["memory_score"] is None and rl_row["real_grounding"] is None
        md_rows = [line for line in (tmp_path / "sweep-results" / p["name"] / "ladder.md").read_text().splitlines()
                   if line.startswith("| grpo | 0 | ")]
        assert md_rows[0].endswith(" | - | 3 |")  # not scored: one dash, not a score and an interval
        for name in ("sft-memory", "sft-grounding"):
            made = tmp_path / "work" / "eval" / f"{name}.transformers.json"
            assert (tmp_path / "sweep" / p["name"] / "eval" / made.name).read_bytes() == made.read_bytes()
    assert "| learning_rate0.001 |" in (tmp_path / "sweep-results" / "sweep.md").read_text()
    made = json.loads((tmp_path / "sweep-results" / "sweep.json").read_text())
    assert (made["points_done"], made["points_planned"]) == (2, 2) and "so far" not in (
        tmp_path / "sweep-results" / "sweep.md").read_text()
    # a sweep stopped after its first point has already said what that point showed
    import argparse

    partial = argparse.Namespace(out=str(tmp_path / "sweep-partial"), stage="grpo", steps=1, seed=0,
                                 grid=["learning_rate=1e-3,1e-5"], sft_from=str(tmp_path / "work"))
    sweep.write_results(partial, points[:1], 2)
    assert "(1 of 2 points so far)" in (tmp_path / "sweep-partial" / "sweep.md").read_text()
    assert json.loads((tmp_path / "sweep-partial" / "sweep.json").read_text())["points"] == json.loads(
        json.dumps(points[:1]))
    assert json.loads((tmp_path / "shipped" / "card.json").read_text()) == card  # sweeps ship nothing
    # a sweep whose last point never ran is tabled from the points that finished, training nothing
    before = sorted(str(f) for f in (tmp_path / "sweep").rglob("*"))
    reported = sweep.main(["--sft_from", str(tmp_path / "work"), "--grid", "learning_rate=1e-3,1e-5,3e-4",
                           "--steps", "1", "--work_root", str(tmp_path / "sweep"), "--out",
                           str(tmp_path / "sweep-results"), "--report_only"])
    assert json.loads(json.dumps(reported)) == json.loads(json.dumps(points))
    assert "(2 of 3 points so far)" in (tmp_path / "sweep-results" / "sweep.md").read_text()
    assert sorted(str(f) for f in (tmp_path / "sweep").rglob("*")) == before

    # the work folder as a fresh clone has it, without the RL stages' adapters (kept out of the repository): the
    # finished stages are read from their caches, not trained again, and report_only still lists them
    for stage_dir in (tmp_path / "work").glob("seed*/*"):
        shutil.rmtree(stage_dir / "policy")
    assert timeless(ladder.main(_argv(tiny_path, tmp_path))) == timeless(rows)
    assert timeless(ladder.main([*_argv(tiny_path, tmp_path), "--report_only", "true"])) == timeless(rows)
    # a run that selects one stage and seed (as one adding a seed to a finished ladder does) trains only those and
    # reports every run the work folder holds: the shared report keeps the rows it did not select
    picked = ladder.main([*_argv(tiny_path, tmp_path), "--seeds", "1", "--rl_stages", "grpo"])
    assert timeless(picked) == timeless(rows)
    assert [(r["stage"], r["seed"]) for r in json.loads((tmp_path / "results" / "ladder.json").read_text())] == [
        (r["stage"], r["seed"]) for r in rows]
    assert not any((tmp_path / "work").glob("seed*/*/policy")) and not any((tmp_path / "work").glob("seed*/*/checkpoint-*"))

    # report_only publishes the finished stages of a ladder stopped part-way and trains nothing

    shutil.rmtree(tmp_path / "work" / "seed1" / "grpo")
    partial = ladder.main([*_argv(tiny_path, tmp_path), "--report_only", "true"])
    assert partial == rows[:-1] and not (tmp_path / "work" / "seed1" / "grpo").exists()
    assert [r["stage"] for r in json.loads((tmp_path / "results" / "ladder.json").read_text())][-1] == "adrpo"
    assert not (tmp_path / "results" / "ladder_progress.json").exists()  # the removed run left no checkpoint
    shutil.rmtree(tmp_path / "work" / "sft")
    with pytest.raises(FileNotFoundError, match="no finished SFT stage"):
        ladder.main([*_argv(tiny_path, tmp_path), "--report_only", "true"])


def test_bootstrap_interval_is_deterministic_and_covers_the_mean():
    xs = [0.0] * 30 + [1.0] * 18
    ci = bootstrap_ci(xs)
    assert ci == bootstrap_ci(xs) and ci[0] < 18 / 48 < ci[1]
    assert 0.2 < ci[0] and ci[1] < 0.55  # about +-0.14 for 48 Bernoulli(0.375) sessions
    assert bootstrap_ci([None, float("nan")]) is None and bootstrap_ci([0.5]) == [0.5, 0.5]
    assert separated([0.1, 0.2], [0.25, 0.3]) and not separated([0.1, 0.3], [0.25, 0.4])


def test_a_stage_found_trained_on_resume_keeps_its_training_time(tmp_path):
    (tmp_path / "log_history.json").write_text(json.dumps([{"loss": 0.1, "step": 1},
                                                           {"train_runtime": 1081.36, "step": 10}]))
    assert _train_seconds(tmp_path, 0.4) == 1081.4  # resumed: nothing trained now, the log says how long it took
    assert _train_seconds(tmp_path, 1200.04) == 1200.0  # trained now: the wall time measured here
    assert _train_seconds(tmp_path / "missing", 0.4) == 0.4


def test_paired_difference_compares_the_same_sessions_and_reads_its_interval():
    keys = [f"u/p0-s{i}" for i in range(12)]
    spread = [0.0, 0.5, 1.0] * 4  # sessions differ a lot from one another ...
    sft = {"stage": "sft", "seed": 0, "reward_evidence": 0.5, "reward_evidence_ci": [0.25, 0.75],
           "session_reward_evidence": dict(zip(keys, spread))}
    rl = {"stage": "adrpo", "seed": 0, "reward_evidence": 0.6, "reward_evidence_ci": [0.35, 0.85],
          "session_reward_evidence": {k: v + 0.1 for k, v in zip(keys, spread)}}  # ... the stage adds 0.1 to each
    d = paired_difference(sft, rl)
    assert d["sessions"] == 12 and d["mean"] == 0.1 and d["ci"] == [0.1, 0.1]
    lines = verdicts([sft, rl])
    # the unpaired intervals overlap, the paired one does not
    assert lines[0].startswith("ADRPO seed 0 above SFT: no") and "paired over the same 12 sessions: +0.100" in lines[0]
    assert lines[0].endswith("(above)")
    assert paired_difference(sft, {**rl, "session_reward_evidence": {}}) is None


def test_two_seeds_are_also_judged_on_their_mean_per_session():
    keys = [f"u/p0-s{i}" for i in range(12)]
    spread = [0.0, 0.5, 1.0] * 4

    def stage(name, seed, shift, ci):
        per = {k: v + shift for k, v in zip(keys, spread)}
        return {"stage": name, "seed": seed, "alpha": {"adrpo": 4.0, "grpo": 1.0}.get(name),
                "reward_evidence": round(sum(per.values()) / 12, 4),
                "reward_evidence_ci": ci, "session_reward_evidence": per}

    sft = stage("sft", 0, 0.0, [0.25, 0.75])
    rows = [sft, stage("adrpo", 0, 0.0, [0.25, 0.75]), stage("grpo", 0, 0.1, [0.35, 0.85]),
            stage("adrpo", 1, 0.2, [0.45, 0.95]), stage("grpo", 1, 0.1, [0.35, 0.85])]
    assert seed_mean(rows[:3], "adrpo") is None  # one seed: nothing to average
    adrpo = seed_mean(rows, "adrpo")
    assert adrpo["seeds"] == [0, 1] and adrpo["seed_means"] == [0.5, 0.7] and adrpo["reward_evidence"] == 0.6
    assert adrpo["session_reward_evidence"][keys[2]] == pytest.approx(1.1)
    lines = verdicts(rows)
    (a_line,) = [x for x in lines if x.startswith("ADRPO (alpha 4) over seeds 0, 1 (seed 0 0.500, seed 1 0.700)")]
    assert "above SFT: no" in a_line and "paired over the same 12 sessions: +0.100 [0.100, 0.100] (above)" in a_line
    (g_line,) = [x for x in lines if x.startswith("GRPO (alpha 1) over seeds 0, 1")]
    assert "+0.100" in g_line
    (vs,) = [x for x in lines if "the seeds' mean per session: 0.600" in x]
    assert vs.startswith("ADRPO (alpha 4) not told apart from GRPO (alpha 1)") and "+0.000" in vs
    # rows written before rows kept their alpha are named without one
    assert verdicts([sft, {k: v for k, v in rows[1].items() if k != "alpha"}])[0].startswith("ADRPO seed 0 above SFT")


class _Stopped(Exception):
    """What a session's end does to a run: it stops right after a checkpoint."""
def test_a_stopped_rl_run_resumes_from_its_last_checkpoint(tiny_path, tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback


    class StopMidStep3(TrainerCallback):
        """A stop after checkpoint-2, once step 3's rollouts are logged: the resumed run redoes step 3."""

        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 3:
                raise _Stopped(state.global_step)

    monkeypatch.setenv("MEMGYM_TORCH_THREADS", "1")
    a = parse_args(
        [*_argv(tiny_path, tmp_path), "--set", *_rl(max_steps=3, save_steps=2)])
    evaluate = ladder.Evaluator(a, tmp_path / "work")
    folder = tmp_path / "rl"

    def curve():
        return CurveCallback(evaluate, 1, "resumed", folder / "curve_points.partial.json")

    with pytest.raises(_Stopped):
        ladder.train_rl(a, "adrpo", 0, tiny_path, folder, curve(), callbacks=[StopMidStep3()])
    assert (folder / "checkpoint-2").is_dir() and not (folder / "policy").exists()
    assert {json.loads(x)["step"] for x in (folder / "rollouts.0.jsonl").read_text().splitlines()} == {0, 1, 2}
    stopped = json.loads((folder / "clock.json").read_text())
    assert stopped["step"] == 2 and stopped["at_checkpoint"]["checkpoint-2"] == stopped["seconds"] > 0

    # a report of the stopped ladder shows where the run stands at its checkpoint

    keys = evaluate.keys[:2]
    progress = ladder.run_progress(folder, "adrpo", 0, {"session_keys": keys, "session_rewards": {
        "evidence": [0.5, 0.25]}}, keys, 3)
    assert progress["step"] == 2 and progress["steps"] == 3
    assert progress["train_seconds"] == stopped["at_checkpoint"]["checkpoint-2"]
    assert [(c["step"], c["train_reward"] is not None, c["held_out_reward"] is not None)
            for c in progress["curve"]] == [(0, False, True), (1, True, True), (2, True, True)]
    assert progress["curve"][0]["held_out_reward"] == 0.375  # the start's mean over the curve's sessions
    # beside it, the trainer's own engine before its first update, on the same sessions
    assert 0.0 <= progress["curve"][0]["engine_start"] <= 1.0
    # what its rollouts wrote, read on the two updates its checkpoint holds (step 2's rollouts come after it)
    assert progress["train_actions"]["steps"] == 2 and progress["train_signal"]["steps"] == 2
    (line,) = progress_lines([progress])
    assert line.startswith("ADRPO seed 0: stopped at step 2 of 3") and "(step 2)" in line
    assert "Before its first update the trainer's engine scored" in line and "(SFT's evaluation: 0.375)" in line
    plot_curves([], tmp_path / "curves.png", [progress])
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert ladder.run_progress(tmp_path / "never-started", "grpo", 0, {}, keys, 3) is None

    resumed = curve()
    assert [p["step"] for p in resumed.points] == [0, 1, 2]  # measured by the first sitting, kept
    adapter = ladder.train_rl(a, "adrpo", 0, tiny_path, folder, resumed)
    log = json.loads((folder / "log_history.json").read_text())
    assert [e["step"] for e in log if "reward" in e] == [1, 2, 3]
    assert not list(folder.glob("checkpoint-*"))  # the finished adapter replaces the checkpoints
    clock = json.loads((folder / "clock.json").read_text())
    assert clock["step"] == 3 and clock["seconds"] > stopped["seconds"]
    assert ladder._train_seconds(folder, 0.1) == clock["seconds"]
    # both sittings ran on this machine: recorded once, with the dtype the base trained in
    (sitting,) = machine.read(folder)
    assert sitting["cpu"] == machine.cpu_name() and sitting["base_dtype"] in ("float32", "bfloat16")

    # the two sittings sampled and trained what one uninterrupted run does: the same sessions and, from
    # the restored RNG, the same completions (the random tiny model samples different text under another seed)
    straight = ladder.train_rl(a, "adrpo", 0, tiny_path, tmp_path / "straight", None)

    def rollouts(run):
        lines = [json.loads(x) for x in (run / "rollouts.0.jsonl").read_text().splitlines()]
        return [((r["step"], r["session_key"], r["agent"], r["k"]), r["completion"]) for r in lines]

    # the resumed run dropped the step-3 rollouts of the stopped sitting before redoing them: no line twice
    sampled, sampled_straight = rollouts(folder), rollouts(tmp_path / "straight")
    assert {k[0] for k, _ in sampled} == {0, 1, 2} and sampled == sampled_straight
    sampled = dict(sampled)
    assert len(sampled) == len(sampled_straight)
    assert len(set(sampled.values())) > len(sampled) // 2
    one, two = (load_file(f"{p}/adapter_model.safetensors") for p in (adapter, straight))
    assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)


def test_the_oracle_check_counts_outputs_the_completion_limit_would_cut(tiny_path, tmp_path):
    def check(limit):
        a = parse_args(
            [*_argv(tiny_path, tmp_path), "--max_completion_tokens", str(limit)])
        return ladder.oracle_over_limit(a)

    tight, roomy = check(8), check(100_000)
    assert tight["train"]["sessions"] == 2 and tight["held_out"]["sessions"] == 3  # 1 per training user, 3 held out
    assert tight["train"]["over_limit"]["core"] == 2  # a Core block is never 7 bytes long
    assert all(n == 0 for part in ("train", "held_out") for n in roomy[part]["over_limit"].values())
    assert roomy["train"]["longest"] == tight["train"]["longest"] and max(roomy["train"]["longest"].values()) > 8


def test_a_stopped_sft_run_resumes_from_its_last_checkpoint(tiny_path, tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback


    class StopAtFirstSave(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            raise _Stopped(state.global_step)

    monkeypatch.setenv("MEMGYM_TORCH_THREADS", "1")
    a = parse_args(
        [*_argv(tiny_path, tmp_path), "--set", "stages.sft.overrides.max_sessions_per_user=2",
         "stages.sft.overrides.keep_empty_rows=1", "stages.sft.overrides.gradient_accumulation_steps=1",
         "stages.sft.overrides.save_steps=2"])
    folder = tmp_path / "sft"
    with pytest.raises(_Stopped):
        ladder.train_sft(a, folder, callbacks=[StopAtFirstSave()])
    assert (folder / "checkpoint-2").is_dir() and not (folder / "policy").exists()
    stopped = json.loads((folder / "clock.json").read_text())
    assert stopped["step"] == 2

    adapter = ladder.train_sft(a, folder)
    assert not list(folder.glob("checkpoint-*"))
    log = json.loads((folder / "log_history.json").read_text())
    steps = [e["step"] for e in log if "loss" in e]
    assert steps[-1] > 2 and json.loads((folder / "clock.json").read_text())["step"] == steps[-1]
    straight = ladder.train_sft(a, tmp_path / "straight")
    one, two = (load_file(f"{p}/adapter_model.safetensors") for p in (adapter, straight))
    assert one.keys() == two.keys() and all(torch.allclose(one[k], two[k], atol=1e-6) for k in one)
    assert ladder.train_sft(a, folder) == adapter  # found trained: nothing runs


def test_a_work_folder_resumes_only_under_the_settings_that_made_it(tiny_path, tmp_path):
    env = tmp_path / "env.yaml"
    shutil.copy("configs/env/construction_cpu.yaml", env)

    def args(*extra):
        a = parse_args(
            [*_argv(tiny_path, tmp_path), "--env_config", str(env), *extra])
        return a

    work = tmp_path / "work"
    ladder.check_work_dir(args("--report_only", "true"), work)
    assert not (work / "settings.json").exists()  # a report claims no folder
    ladder.check_work_dir(args(), work)
    assert json.loads((work / "settings.json").read_text())["eval_sessions_per_user"] == 3
    ladder.check_work_dir(args("--adapter_out", str(tmp_path / "elsewhere"), "--seeds", "0", "1", "2"), work)
    # another evaluation engine resumes the folder: its evaluations are cached apart
    vllm_args = args("--eval_engine", "vllm")
    ladder.check_work_dir(vllm_args, work)
    assert {ladder.Evaluator(a, work).cache("sft").name for a in (args(), vllm_args)} == {
        "sft.transformers.json", "sft.vllm.json"}
    # greedy outputs move with the engine's dtype: a vLLM evaluation cached in another is made again (one cached
    # before evaluations recorded theirs ran in vLLM's bfloat16)
    on_vllm = ladder.Evaluator(vllm_args, work)
    assert on_vllm.engine_dtype() == cpu_engine_dtype() and ladder.Evaluator(args(), work).same_dtype({})
    assert on_vllm.same_dtype({"engine_dtype": cpu_engine_dtype()})
    assert on_vllm.same_dtype({}) == (cpu_engine_dtype() == "bfloat16")
    with pytest.raises(ValueError, match="eval_engine 'cuda'"):
        args("--eval_engine", "cuda")
    with pytest.raises(SystemExit, match=r"eval_sessions_per_user 3 -> 6\..*another work_dir"):
        ladder.check_work_dir(args("--eval_sessions_per_user", "6"), work)
    env.write_text(env.read_text() + "\n# edited\n")
    with pytest.raises(SystemExit, match="env_config_sha256"):
        ladder.check_work_dir(args(), work)


def test_the_ladder_pins_the_engines_kv_cache_and_reads_older_folders_as_made_with_2_gb(tiny_path, tmp_path,
                                                                                        monkeypatch):


    def args(*extra):
        a = parse_args([*_argv(tiny_path, tmp_path), *extra])
        return a

    # a size in the environment does not decide the results: the recipe's setting does
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    ladder.pin_engine(args())
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "2"
    ladder.pin_engine(args("--vllm_kv_cache_gb", "3"))
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "3"
    with pytest.raises(ValueError, match="vllm_kv_cache_gb 0"):
        args("--vllm_kv_cache_gb", "0")
    # a folder made before the setting existed ran with 2 GB: it resumes under 2 GB and refuses 1 GB
    work = tmp_path / "work"
    ladder.check_work_dir(args(), work)
    made = json.loads((work / "settings.json").read_text())
    assert made.pop("vllm_kv_cache_gb") == 2
    (work / "settings.json").write_text(json.dumps(made))
    ladder.check_work_dir(args(), work)
    with pytest.raises(SystemExit, match="vllm_kv_cache_gb 2 -> 1"):
        ladder.check_work_dir(args("--vllm_kv_cache_gb", "1"), work)


def test_an_rl_ablation_takes_sft_only_from_a_ladder_with_the_same_sft_settings(tiny_path, tmp_path):
    src = tmp_path / "work"

    def args(*extra):
        a = parse_args(
            [*_argv(tiny_path, tmp_path), "--rl_stages", "adrpo", "--sft_from", str(src),
             "--work_dir", str(tmp_path / "alpha2"), "--set", "stages.adrpo.overrides.env_overrides.alpha=2", *extra])
        return a

    # the source ladder's settings
    ladder.check_work_dir(args("--work_dir", str(src), "--set", "stages.adrpo.overrides.env_overrides.alpha=4"), src)
    with pytest.raises(SystemExit, match=r"stages\.sft\.overrides\.learning_rate 0\.001 there, 0\.5 here.*Only the RL"):
        ladder.take_sft(args("--set", "stages.sft.overrides.learning_rate=0.5"), tmp_path / "alpha2")
    with pytest.raises(SystemExit, match="SFT stage has not finished"):  # RL settings may differ; SFT must be there
        ladder.take_sft(args("--set", *_rl(learning_rate="3e-4")), tmp_path / "alpha2")
    with pytest.raises(SystemExit, match="not a ladder's work folder"):
        ladder.take_sft(args("--sft_from", str(tmp_path / "nowhere")), tmp_path / "alpha2")
    with pytest.raises(ValueError, match="rl_stages"):
        args("--rl_stages", "adrpo", "ppo")
    assert args("--adapter_out", "null").adapter_out is None


def test_the_recipe_command_leaves_out_where_the_outputs_go():
    argv = ["--config", "c.yaml", "--work_dir", "/root/w", "--results_dir=/tmp/r", "--rl_steps", "5",
            "--adapter_out", "/x/a", "--report_only", "true"]
    assert recipe_command(argv) == "python -m train.ladder --config c.yaml --rl_steps 5"
