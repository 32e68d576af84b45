"""Evidence that training works: base -> SFT -> SFT+ADRPO (alpha 4) and SFT+GRPO (alpha 1).

    make ladder                     # = python -m train.ladder --config configs/train/ladder_smollm2_cpu.yaml

SFT on the world oracle's trajectories of the training users (once, with its config's seed), then for
each seed ADRPO and plain GRPO, both continuing the SFT LoRA adapter on the training users' sessions;
each stage is ``train/sft.py`` or ``train/adrpo.py`` with its config and the ladder's overrides
(``train.ladder.settings``).
Every stage is evaluated on held-out users of the same world (never in SFT or RL data), greedy:

* JSON validity per agent and the share of outputs cut at the token limit;
* MemoryGym-v0's session reward in ``evidence`` mode, with a 95% bootstrap interval over
  sessions (and in ``choice`` mode when ``choice_answerer`` is set), on sessions spread over
  every period of the held-out users (``eval_session_pick``);
* its gain over writing nothing (the reward minus the no-op's, session by session), against the
  oracle's gain, the most writing adds on those sessions;
* the memory score of MemoryGym-Interactive-v0's MemBuilder assistant writing memory with the
  stage's policy, on a small world of its own users, with a 95% bootstrap interval over
  (user, period) cells;
* during RL, a learning curve: the train reward of every step and the held-out reward on the
  ``curve_sessions`` held-out sessions (``curve_pick``) every ``curve_every`` steps.

Writes ``results/ladder.json`` (one row per stage and seed), ``results/ladder.md`` (tables,
command, config, timings), ``results/ladder.png`` and ``results/ladder_curves.png`` after every
stage, so an interrupted ladder still leaves what it finished; each finished stage is cached
under ``work_dir`` and a rerun resumes. The ADRPO adapter of the first seed is exported in
bfloat16 to ``adapter_out`` with a card of its command, config and held-out scores.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from membuilder.plumbing.json_files import atomic_write_bytes, write_json
from membuilder.plumbing.stats import bootstrap_ci
from membuilder.training.checkpoints import save_policy, set_adapter_base
from memgym_env.benchmarks.grounding import distinct_grounding
from train import adrpo, sft
from train.common import close_colocated_engine
from train.ladder import machine
from train.ladder.curve_callback import CurveCallback, same_pick
from train.ladder.evaluator import Evaluator, cached_json, oracle_over_limit
from train.ladder.policy_actions import edits_against_expert, held_out_actions, rollout_actions
from train.ladder.pooled import differences
from train.ladder.report import recipe_command, recipe_config, table, write_results
from train.ladder.rl_signal import pack_rollouts, paired_train_difference, rl_signal, time_split
from train.ladder.settings import RL_STAGES, LadderArgs, parse_args, rl_argv, sft_argv
from train.ladder.stage_clock import CLOCK, StageClock, clock_seconds
from train.ladder.work_folder import check_work_dir, pin_engine, take_sft


def _log_history(folder: Path, trainer) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1), encoding="utf-8")


def train_sft(a: LadderArgs, folder: Path, callbacks=()) -> str:
    """The SFT adapter folder (trained unless a resumed ladder already has it).

    Like the RL runs, SFT saves a checkpoint every ``save_steps`` updates and a stopped ladder resumes it
    from the last one: on two cores SFT alone outlasts a short sitting."""
    return _portable(a, _train_resumable(folder, lambda: sft.build(sft_argv(a, folder)), callbacks))


def train_rl(a: LadderArgs, stage: str, seed: int, start: str, folder: Path, curve, callbacks=()) -> str:
    """RL stage ``stage`` (ADRPO, or GRPO: alpha 1) continuing the SFT adapter at ``start``; returns the new
    adapter folder.

    The run saves a checkpoint every ``save_steps`` steps; a stopped run resumes from its last one
    (adapter, optimizer, scheduler, data order and RNG), so a run longer than one sitting still finishes."""
    adapter = _portable(a, _train_resumable(folder, lambda: adrpo.build(rl_argv(a, stage, seed, start, folder)),
                                            (*([curve] if curve is not None else []), *callbacks)))
    pack_rollouts(folder)
    return adapter


def _portable(a: LadderArgs, adapter: str) -> str:
    """A stage's adapter names the ladder's base model by its short name, so a work folder carried to another
    machine (results/ladder-change/work) finds its base there; every stage of a ladder trains that one model."""
    set_adapter_base(adapter, a.model_name_or_path)
    return adapter


def _train_resumable(folder: Path, build, callbacks) -> str:
    """Train the stage ``build()`` makes from its last checkpoint in ``folder`` (if any), save its policy and
    log, and drop the checkpoints; a stage already trained is left as it is. Returns the adapter folder."""
    from transformers.trainer_utils import get_last_checkpoint

    adapter = folder / "policy" / "adapter"
    if (adapter / "adapter_config.json").exists():
        return str(adapter)
    last = get_last_checkpoint(str(folder)) if folder.is_dir() else None
    trainer, _, tokenizer = build()
    for callback in (StageClock(folder, last), *callbacks):
        trainer.add_callback(callback)
        if hasattr(callback, "attach"):  # a callback that generates with the trainer's own engine
            callback.attach(trainer)
    if last:
        print(f"{folder}: resuming from {last}")
    trainer.train(resume_from_checkpoint=last)
    save_policy(trainer.model, tokenizer, folder / "policy")
    _log_history(folder, trainer)
    close_colocated_engine(trainer)  # the next stage builds its own engine in this process
    del trainer
    gc.collect()
    for done in folder.glob("checkpoint-*"):  # the finished adapter replaces them
        shutil.rmtree(done)
    return str(adapter)


def _finished(evaluate: Evaluator, folder: Path, name: str) -> bool:
    """Whether a stage has its trained adapter (or was trained elsewhere) and both of its cached evaluations (on
    the ladder's engine)."""
    return (((folder / "policy" / "adapter" / "adapter_config.json").exists() or _trained_elsewhere(folder))
            and all(evaluate.cache(f"{name}{part}").exists() for part in ("", "-memory")))


def _trained_elsewhere(folder: Path) -> bool:
    """An RL stage that finished on another machine: its training log (written once training ends) came with the
    work folder, its adapter (tens of MB, kept out of the repository) did not. Its cached evaluations stand, so a
    fresh clone adds a seed without training the finished ones again; only shipping it needs the weights."""
    return (folder / "log_history.json").exists() and not (folder / "policy" / "adapter" / "adapter_config.json").exists()


def _train_seconds(folder: Path, elapsed: float) -> float:
    """Seconds a stage trained: its clock summed over the sittings it took (``StageClock``), else the wall
    time measured here, or, when a resumed ladder found the stage already trained (so nothing was
    measured), the trainer's own runtime from its saved log."""
    seconds = clock_seconds(folder)
    if seconds is not None:
        return round(seconds, 1)
    path = folder / "log_history.json"
    if elapsed < 60 and path.exists():
        for entry in json.loads(path.read_text(encoding="utf-8")):
            if "train_runtime" in entry:
                return round(float(entry["train_runtime"]), 1)
    return round(elapsed, 1)


def train_curve(folder: Path) -> dict[int, float]:
    """Mean train reward (the session reward ADRPO maximises) per optimizer step, from the run's log."""
    path = folder / "log_history.json"
    return _train_rewards(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else {}


def _train_rewards(log_history: list[dict[str, Any]]) -> dict[int, float]:
    return {int(e["step"]): round(float(e["reward"]), 4) for e in log_history if "step" in e and "reward" in e}


def run_progress(folder: Path, stage: str, seed: int, start: dict[str, Any], curve_keys: list[str],
                 steps: int, pick: str | None = None) -> dict[str, Any] | None:
    """Where an RL run stopped part-way stands at its last checkpoint: the step, its training time and the
    curve so far (train reward from the checkpoint's log, held-out points up to it, those measured on sessions
    picked by ``pick`` where it is given); None without one."""
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(folder)) if folder.is_dir() else None
    if last is None:
        return None
    state = json.loads((Path(last) / "trainer_state.json").read_text(encoding="utf-8"))
    step = int(state["global_step"])
    clock = json.loads((folder / CLOCK).read_text(encoding="utf-8")) if (folder / CLOCK).exists() else {}
    partial = folder / "curve_points.partial.json"
    points = json.loads(partial.read_text(encoding="utf-8")) if partial.exists() else []
    points = [p for p in (points if pick is None else same_pick(points, pick)) if p["step"] <= step]
    return {"stage": stage, "seed": seed, "step": step, "steps": steps,
            "train_seconds": clock.get("at_checkpoint", {}).get(Path(last).name),
            "train_signal": rl_signal(folder, until=step), "train_actions": rollout_actions(folder, until=step),
            "curve": _curve_rows(_train_rewards(state["log_history"]), {0: _subset_mean(start, curve_keys)}, points)}


def pair_seeds(work: Path, runs: list[dict[str, Any]], steps: dict[str, int]) -> None:
    """Give each seed's GRPO row (finished or stopped part-way) ``train_vs_adrpo``: its train reward minus ADRPO's,
    paired by step (a seed's two runs draw the same sessions), up to the step both have reached."""
    by = {(r["stage"], r["seed"]): r for r in runs}
    for (stage, seed), grpo in by.items():
        adrpo = by.get(("adrpo", seed))
        if stage != "grpo" or adrpo is None:
            continue
        until = min(adrpo.get("step", steps["adrpo"]), grpo.get("step", steps["grpo"]))  # "step": where a stopped run stands
        grpo["train_vs_adrpo"] = paired_train_difference(work / f"seed{seed}" / "adrpo",
                                                         work / f"seed{seed}" / "grpo", until=until)


def _subset_mean(res: dict[str, Any], keys: list[str]) -> float:
    by_key = dict(zip(res["session_keys"], res["session_rewards"]["evidence"], strict=True))
    return round(sum(by_key[k] for k in keys) / len(keys), 4)


def make_curve(folder: Path, start: dict[str, Any], end: dict[str, Any], points: list[dict[str, float]],
               curve_keys: list[str], steps: int) -> list[dict[str, Any]]:
    """{step, train_reward, held_out_reward} per step: held-out at 0 (the SFT policy), every N, and the end
    (all on the same ``curve_keys`` sessions)."""
    ends = {0: _subset_mean(start, curve_keys), steps: _subset_mean(end, curve_keys)}
    return _curve_rows(train_curve(folder), ends, points)


def _curve_rows(train: dict[int, float], held: dict[int, float], points: list[dict[str, float]]):
    """The curve's rows: train reward per step, held-out reward at ``held``'s steps and the callback's points.

    Step 0 stays SFT's own evaluation; the callback's step-0 point (the trainer's engine before any update)
    goes beside it as ``engine_start``, so a run whose engine does not start where SFT ended shows it."""
    start = next((round(p["held_out_reward"], 4) for p in points if int(p["step"]) == 0), None)
    held = {**held, **{int(p["step"]): round(p["held_out_reward"], 4) for p in points if int(p["step"])}}
    return [{"step": s, "train_reward": train.get(s), "held_out_reward": held.get(s),
             **({"engine_start": start} if s == 0 and start is not None else {})}
            for s in sorted(set(train) | set(held))]


def row(stage: str, seed: int, res: dict[str, Any], users: list[str], seconds: float | None,
        curve: list[dict[str, Any]] | None = None, signal: dict[str, Any] | None = None,
        actions: dict[str, Any] | None = None, alpha: float | None = None, attribution: str | None = None,
        changed: dict[str, bool] | None = None, time_split: dict[str, Any] | None = None,
        credit: str | None = None, against_expert: dict[str, Any] | None = None,
        machines: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One stage's row of results/ladder.json; RL rows add their alpha, attribution rule and credit, curve,
    ``train.ladder.rl_signal``'s summary, ``train.ladder.policy_actions``' reading of their rollouts and where their
    training time went. ``changed`` names the held-out sessions where a needed value changed: the row reads the
    stage's actions there apart (does it edit memory where it must?); ``against_expert``, its edits held against the
    expert's per agent (``policy_actions.edits_against_expert``); ``machines``, what each of its training sittings
    ran on (``train.ladder.machine``)."""
    changed = changed or {}
    outputs = res.get("outputs") or {}
    return {"stage": stage, "seed": seed, "alpha": alpha, "attribution": attribution, "credit": credit,
            "reward_mode": res.get("reward_mode", "evidence"),
            "valid_rate": res["valid_rate"], "cut_rate": res.get("cut_rate"),
            "reward_evidence": res["reward"]["evidence"], "reward_evidence_ci": res["reward_ci"]["evidence"],
            "reward_choice": res["reward"].get("choice"), "reward_choice_ci": res["reward_ci"].get("choice"),
            "task_reward_evidence": res["task_reward"]["evidence"], "held_out_users": users,
            "held_out_sessions": res["sessions"], "memory_score": res.get("memory_score"),
            "memory_score_ci": res.get("memory_score_ci"), "memory_score_cells": res.get("memory_score_cells"),
            "curve": curve or [], "train_seconds": seconds, "eval_seconds": res.get("eval_seconds"),
            "eval_engine": res.get("engine"), "train_signal": signal, "train_actions": actions,
            "held_out_actions": held_out_actions(outputs) if outputs else None,
            "session_changed": {k: changed[k] for k in res["session_keys"] if k in changed} or None,
            "held_out_actions_changed": (held_out_actions({k: o for k, o in outputs.items() if changed.get(k)})
                                         if outputs and any(changed.values()) else None),
            "held_out_quotes": res.get("quoted"), "held_out_edits_vs_expert": against_expert,
            "grounding": res.get("grounding"), "time_split": time_split,
            # every entry written stays in the stage's cache (eval/<stage>-grounding.*.json), not in each row
            "real_grounding": _real_grounding(res.get("real_grounding")),
            "machines": machines or None,
            # where each evaluation ran, None for one cached before evaluations recorded it
            "evaluated_on": _evaluated_on(res),
            **{k: res.get(k) for k in MEMORY_FIELDS},
            # per held-out session, so two stages can be compared session by session (a paired bootstrap)
            "session_reward_evidence": dict(zip(res["session_keys"], res["session_rewards"]["evidence"], strict=True)),
            "session_noop_evidence": (dict(zip(res["session_keys"], res["session_noop"]["evidence"], strict=True))
                                      if (res.get("session_noop") or {}).get("evidence") else None),
            "held_out_pick": res.get("session_pick", "first"), **learnable(res)}


# The interactive evaluation's figures a row carries beside the memory score (Evaluator.memory_score).
MEMORY_FIELDS = ("memory_accuracy", "memory_accuracy_ci", "memory_upper_bound", "memory_random", "memory_questions",
                 "memory_score_cells_low_headroom", "memory_score_seconds", "memory_correct")


def learnable(res: dict[str, Any]) -> dict[str, Any]:
    """The held-out set's no-op and oracle evidence rewards (writing nothing, the expert's writing), the stage's
    gain over no-op (its reward minus no-op's, session by session, with a 95% bootstrap interval) and the oracle's
    gain, the ceiling; all None for an evaluation without them."""
    noop = (res.get("session_noop") or {}).get("evidence")
    if noop is None:
        return {k: None for k in ("noop_evidence", "oracle_evidence", "gain_evidence", "gain_evidence_ci",
                                  "oracle_gain_evidence", "per_period_evidence")}
    gains = [r - z for r, z in zip(res["session_rewards"]["evidence"], noop, strict=True)]
    return {"noop_evidence": res["noop_reward"]["evidence"], "oracle_evidence": res["oracle_reward"]["evidence"],
            "gain_evidence": res["gain"]["evidence"], "gain_evidence_ci": bootstrap_ci(gains),
            "oracle_gain_evidence": res["oracle_gain"]["evidence"],
            "per_period_evidence": (res.get("per_period") or {}).get("evidence")}


def _evaluated_on(res: dict[str, Any]) -> dict[str, Any] | None:
    where = res.get("evaluated_on") or {}
    return where if any(where.values()) else None


def _real_grounding(g: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stage's conv-26 result for its row: every entry written stays in its cache (eval/<stage>-grounding.*.json),
    not in each row; the distinct-entry figures are made from those entries where the cache predates them."""
    if not g:
        return None
    distinct = g.get("distinct") or (distinct_grounding(g["writes"]) if g.get("writes") else None)
    return {**{k: v for k, v in g.items() if k not in ("writes", "policy_weights")}, "distinct": distinct}


def _scores(r: dict[str, Any]) -> dict[str, Any]:
    return {**{k: r[k] for k in ("valid_rate", "reward_evidence", "reward_evidence_ci", "memory_score",
                                 "memory_score_ci", "held_out_sessions", "held_out_users")},
            **{k: r.get(k) for k in ("reward_mode", "noop_evidence", "gain_evidence", "gain_evidence_ci",
                                     "oracle_gain_evidence", "memory_accuracy", "memory_accuracy_ci", "grounding")},
            "real_grounding": {k: v for k, v in (r.get("real_grounding") or {}).items() if k != "examples"} or None}


def pooled_rewards(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each trained stage's held-out reward pooled over its seeds (the mean over seeds and sessions)."""
    by: dict[str, list[float]] = {}
    for r in rows:
        if r["stage"] != "base":
            by.setdefault(r["stage"], []).append(float(r["reward_evidence"]))
    return {stage: round(sum(v) / len(v), 4) for stage, v in by.items()}


def ship_best(a: LadderArgs, work: Path, rows: list[dict[str, Any]], argv: list[str]) -> Path | None:
    """Ship the stage with the best pooled held-out reward so far (SFT wins ties, being the cheaper): the adapter of
    its first seed whose weights are on this machine (a stage trained elsewhere keeps only its caches), so the
    choice of stage is the only one made on the held-out sessions. Re-exported only when the choice changes."""
    pooled = pooled_rewards(rows)
    if not a.adapter_out or a.sft_from or not pooled:  # an ablation on another ladder's SFT stage ships nothing
        return None
    order = ["sft", *RL_STAGES]
    stage = max(pooled, key=lambda s: (pooled[s], -order.index(s)))

    def adapter_of(seed: int) -> Path:
        return work / ("sft" if stage == "sft" else f"seed{seed}/{stage}") / "policy" / "adapter"

    seeds = sorted(r["seed"] for r in rows if r["stage"] == stage)
    here = [s for s in seeds if (adapter_of(s) / "adapter_model.safetensors").exists()]
    if not here:
        print(f"not shipped: {stage} leads the pooled held-out reward, but none of its seeds' adapters is on this "
              f"machine; remove {adapter_of(seeds[0]).parent.parent} and run the ladder again to train it here")
        return None
    first = here[0]
    best = next(r for r in rows if r["stage"] == stage and r["seed"] == first)
    card_path = Path(a.adapter_out) / "card.json"
    if card_path.exists():
        card = json.loads(card_path.read_text(encoding="utf-8"))
        if card.get("stage") == stage and card.get("seed") == first and card.get("pooled") == pooled:
            return None
    adapter = adapter_of(first)
    why = ("the best held-out reward pooled over seeds among the stages finished: "
           + ", ".join(f"{s} {v:.3f}" for s, v in sorted(pooled.items(), key=lambda kv: -kv[1])))
    against = against_sft(rows, stage)
    if against:
        lo, hi = against["ci"]
        why += (f"; {stage} - sft paired by session and pooled over {against['n_seeds']} seed(s) and "
                f"{against['n_sessions']} sessions: {against['mean']:+.3f} [{lo:.3f}, {hi:.3f}]"
                + {"above": "", "below": ", below SFT"}.get(against["reads"],
                                                               ", not told apart from SFT: the lead is within the noise"))
    return export_adapter(a, stage, first, str(adapter), _scores(best), argv, why, pooled, against)


def against_sft(rows: list[dict[str, Any]], stage: str) -> dict[str, Any] | None:
    """The shipped RL stage minus SFT as the report pools it (``differences``: paired by session, the
    interval resampling seeds and sessions), so the card says whether its lead is more than the spread between
    seeds; None for SFT or rows without sessions."""
    d = next((d for d in differences(rows).values() if d["a"] == "sft" and d["b"] == stage), None)
    if d is None:
        return None
    return {"mean": round(float(d["mean"]), 4), "ci": [round(float(x), 4) for x in d["ci"]],
            "reads": d["reads"], "n_seeds": d["n_seeds"], "n_sessions": d["n_sessions"]}


def _how(a: LadderArgs, stage: str, seed: int) -> str:
    if stage == "sft":
        return "SFT on world-oracle trajectories"
    rule = "plain GRPO" if a.alpha(stage) == 1.0 else f"ADRPO (alpha {a.alpha(stage)}, {a.attribution(stage)} attribution)"
    credit = "" if a.credit(stage) == "joint" else f", {a.credit(stage).replace('_', '-')} credit"
    return f"SFT on world-oracle trajectories, then {rule}{credit}, seed {seed}"


def policy_setting(a: LadderArgs) -> dict[str, Any]:
    """The setting a shipped policy was trained and judged in, which `memgym demo` replays: the world, the users,
    the held-out pick, the token limits and the window a longer session is written in."""
    return {"env_config": a.env_config, "env_overrides": a.env_overrides, "train_users": a.train_users,
            "held_out_users": a.held_out_users, "eval_session_pick": a.eval_session_pick,
            "max_completion_tokens": a.max_completion_tokens, "max_prompt_tokens": a.max_prompt_tokens,
            "write_window_tokens": a.write_window_tokens}


def export_adapter(a: LadderArgs, stage: str, seed: int, adapter: str, scores: dict[str, Any], argv: list[str],
                   why: str, pooled: dict[str, float], against: dict[str, Any] | None = None) -> Path:
    """The shipped policy: the adapter's weights in bfloat16 beside a card saying which stage it is, why, how it was
    made and the setting it was trained in."""
    import torch
    from safetensors.torch import load_file, save

    out = Path(a.adapter_out)
    out.mkdir(parents=True, exist_ok=True)
    weights = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(Path(adapter) / "adapter_model.safetensors").items()}
    atomic_write_bytes(out / "adapter_model.safetensors", save(weights, metadata={"format": "pt"}))
    config = json.loads((Path(adapter) / "adapter_config.json").read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = a.model_name_or_path  # a short name: resolved on the user's machine
    (out / "adapter_config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    card = {"what": f"LoRA adapter for SmolLM2-135M-Instruct writing MemBuilder's four memories: {_how(a, stage, seed)}",
            "stage": stage, "seed": seed, "why": why, "pooled": pooled, "against_sft": against,
            "setting": policy_setting(a),
            "command": recipe_command(argv), "config": recipe_config(a), "held_out": scores}
    write_json(out / "card.json", card)
    return out


def stage_runs(a: LadderArgs, work: Path) -> list[tuple[int, str, bool]]:
    """(seed, RL stage, selected) in the order the ladder takes them: the runs ``seeds``, ``rl_stages`` and
    ``stage_seeds`` select, which it trains, and every other run the work folder already holds, which it only
    reports. A run adding one stage or seed to a finished ladder so rewrites the shared report with all of them,
    not with its own selection alone."""
    held = {int(p.name[4:]) for p in work.glob("seed*") if p.name[4:].isdigit()} if work.is_dir() else set()
    runs = []
    for seed in sorted({*a.seeds, *held}):
        for stage in (s for s in RL_STAGES if s in a.stages):
            selected = stage in a.rl_stages and seed in a.seeds_of(stage)
            if selected or (work / f"seed{seed}" / stage).is_dir():
                runs.append((seed, stage, selected))
    return runs


def run(a: LadderArgs, argv: list[str]) -> list[dict[str, Any]]:
    work = Path(a.work_dir)
    check_work_dir(a, work)
    pin_engine(a)
    if a.sft_from and not a.report_only:
        take_sft(a, work)
    evaluate = Evaluator(a, work)
    rows: list[dict[str, Any]] = []
    progress: list[dict[str, Any]] = []  # RL runs a report finds stopped part-way
    timings = cached_json(work / "timings.json", dict)
    oracle = oracle_over_limit(a)
    t_start = time.perf_counter()

    steps = {stage: a.stage_config(stage)["max_steps"] for stage in RL_STAGES if stage in a.stages}
    changed = evaluate.changed_sessions()
    expert = evaluate.expert_outputs()

    def vs_expert(res: dict[str, Any]) -> dict[str, Any] | None:
        outputs = res.get("outputs") or {}
        return edits_against_expert(outputs, expert, evaluate.quote_misses(outputs)) if outputs else None

    def publish():
        pair_seeds(work, [*rows, *progress], steps)
        write_json(work / "timings.json", timings)
        write_results(a, rows, time.perf_counter() - t_start, argv, timings, oracle, progress)

    base_done = all(evaluate.cache(f"base{part}").exists() for part in ("", "-memory"))
    if a.report_only and not (base_done and _finished(evaluate, work / "sft", "sft")):
        raise FileNotFoundError(f"report_only: {work} holds no finished SFT stage to report (run the ladder first)")
    base = evaluate.cached(a.model_name_or_path, "base", "base")
    rows.append(row("base", a.sft_seed, base, evaluate.users, None, changed=changed, against_expert=vs_expert(base)))
    publish()
    t = time.perf_counter()
    sft_policy = train_sft(a, work / "sft")
    timings.setdefault("sft", _train_seconds(work / "sft", time.perf_counter() - t))
    sft_res = evaluate.cached(sft_policy, "sft", "sft")
    rows.append(row("sft", a.sft_seed, sft_res, evaluate.users, timings["sft"], changed=changed,
                    against_expert=vs_expert(sft_res), machines=machine.read(work / "sft")))
    if not a.report_only:
        ship_best(a, work, rows, argv)  # SFT until an RL stage's pooled result beats it
    publish()
    for seed, stage, selected in stage_runs(a, work):
        folder = work / f"seed{seed}" / stage
        if (a.report_only or not selected) and not _finished(evaluate, folder, f"{stage}-{seed}"):
            partial = run_progress(folder, stage, seed, sft_res, evaluate.curve_keys(), steps[stage],
                                   a.eval_session_pick)
            if partial:
                progress.append(partial)
            continue
        curve = CurveCallback(evaluate, a.curve_every, f"{stage} seed {seed}",
                              folder / "curve_points.partial.json")
        t = time.perf_counter()
        elsewhere = _trained_elsewhere(folder)
        policy = None if elsewhere else train_rl(a, stage, seed, sft_policy, folder, curve)
        timings.setdefault(f"{stage}/{seed}", _train_seconds(folder, time.perf_counter() - t))
        points = same_pick(cached_json(folder / "curve_points.json", lambda c=curve: c.points), a.eval_session_pick)
        res = evaluate.cached(policy, f"{stage} seed {seed}", f"{stage}-{seed}",
                              grounding=seed in a.grounding_seeds)
        curve_rows = make_curve(folder, sft_res, res, points, evaluate.curve_keys(), steps[stage])
        rows.append(row(stage, seed, res, evaluate.users, timings[f"{stage}/{seed}"], curve_rows,
                        rl_signal(folder), rollout_actions(folder), a.alpha(stage), a.attribution(stage),
                        changed, time_split(folder), a.credit(stage), vs_expert(res), machine.read(folder)))
        if not a.report_only:  # a report ships nothing new
            ship_best(a, work, rows, argv)
        publish()
    if progress:
        publish()
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    rows = run(a, argv)
    print(table(rows))
    print(f"results: {a.results_dir}/ladder.json, ladder.md, ladder.png, ladder_curves.png")
    return rows


if __name__ == "__main__":
    main()
