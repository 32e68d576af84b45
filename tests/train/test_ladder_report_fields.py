"""The ladder report's per-stage tables and the RL log readings behind them (time split, dominant memory by rule)."""

from __future__ import annotations

import json

import pytest

from membuilder.memory.ops import AGENTS
from train.ladder import report, stage_tables
from train.ladder.rl_signal import dominant_by_rule, rl_signal, time_split
from train.ladder.settings import LadderArgs

KEYS = [f"u/p{i % 3}-s{i}" for i in range(12)]


def _history(folder, entries):
    (folder / "log_history.json").write_text(json.dumps(entries))


def test_time_split_counts_each_logged_mean_once_per_step_it_covers(tmp_path):
    assert time_split(tmp_path) is None
    _history(tmp_path, [
        {"step": 1, "loss": 0.1, "time/generate": 10.0, "time/score": 2.0},
        {"step": 2, "loss": 0.1, "time/generate": 12.0, "time/score": 4.0},
        {"step": 4, "loss": 0.1, "time/generate": 8.0, "time/score": 1.0},  # logged every 2 steps from here
        {"step": 4, "eval_loss": 0.3},  # an evaluation entry of the same step has no timing
        {"step": 4, "train_runtime": 100.0},  # the closing summary neither
    ])
    # a step's entries merge, so the evaluation and the summary hide none of its timing
    assert time_split(tmp_path) == {"generation_s": 38.0, "scoring_s": 8.0, "steps": 4}


def test_time_split_of_a_run_logged_every_step(tmp_path):
    _history(tmp_path, [{"step": s, "time/generate": 10.0 + s, "time/score": 1.0} for s in (1, 2, 3)]
             + [{"step": 3, "train_runtime": 60.0, "train_loss": 0.2}])
    assert time_split(tmp_path) == {"generation_s": 36.0, "scoring_s": 3.0, "steps": 3}
    assert time_split(tmp_path, until=2) == {"generation_s": 23.0, "scoring_s": 2.0, "steps": 2}


def _attribution(step, rule, **shares):
    return {f"attribution/{rule}/dominant_{t}": shares.get(t, 0.0) for t in (*AGENTS, "none")} | {"step": step}


def test_dominant_memory_type_under_each_rule(tmp_path):
    assert dominant_by_rule(tmp_path) is None
    entries = [_attribution(1, "evidence", semantic=1.0) | _attribution(1, "retrieval", episodic=0.5, none=0.5),
               _attribution(2, "evidence", semantic=0.5, core=0.5) | _attribution(2, "retrieval", episodic=1.0)]
    _history(tmp_path, [*entries, {"step": 2, "train_loss": 0.1, "adrpo/dominant_none": 0.0}][:2])
    by_rule = dominant_by_rule(tmp_path)
    assert by_rule["evidence"] == {"core": 0.25, "episodic": 0.0, "semantic": 0.75, "procedural": 0.0, "none": 0.0}
    assert by_rule["retrieval"]["episodic"] == 0.75 and by_rule["retrieval"]["none"] == 0.25
    assert dominant_by_rule(tmp_path, until=1)["evidence"]["semantic"] == 1.0
    # rl_signal carries it beside the older one-rule reading
    (tmp_path / "rollouts.0.jsonl").write_text(json.dumps(
        {"mode": "train", "step": 0, "session_key": "u/p0-s0", "agent": "core", "reward": 1.0}) + "\n")
    assert rl_signal(tmp_path)["dominant_by_rule"] == by_rule


def _shares(edit):
    return {"outputs": 4, "shares": {"new": 1 - edit, "edit": edit, "nothing": 0.0, "invalid": 0.0},
            "ops_per_output": 1.0}


def _signal():
    """``rl_signal``'s summary of a 10-step run, as a row carries it."""
    part = {"mean": 0.2, "ci": [0.1, 0.3], "steps": 2}
    return {"steps": 10, "window": 2, "first": part, "last": part, "dominant": {"semantic": 0.9, "none": 0.1},
            "per_agent": {a: {"first": part, "last": part} for a in AGENTS}, "agent_prompts": 40,
            "frac_prompts_alike": 0.25, "frac_prompts_alike_per_agent": {a: 0.25 for a in AGENTS},
            "dominant_by_rule": {"evidence": {"semantic": 0.9, "none": 0.1}, "retrieval": {"episodic": 0.6,
                                                                                        "semantic": 0.4}}}


AMD = {"cpu": "AMD EPYC 9R14 96-Core Processor", "amx": False, "avx512_bf16": True, "cores": 2, "torch": "2.13.0",
       "base_dtype": "float32"}
XEON = {"cpu": "Intel(R) Xeon(R) Processor", "amx": True, "avx512_bf16": True, "cores": 2, "torch": "2.13.0",
        "base_dtype": "bfloat16"}
# where an evaluation ran (train.ladder.machine.evaluating): no torch or dtype, the engine's is in the cache
AMD_EVAL = {k: AMD[k] for k in ("cpu", "amx", "avx512_bf16", "cores")}
XEON_EVAL = {k: XEON[k] for k in ("cpu", "amx", "avx512_bf16", "cores")}


def _row(stage, seed, shift=0.0, new_fields=True):
    per = {k: round((i % 3) * 0.3 + shift, 4) for i, k in enumerate(KEYS)}
    r = {"stage": stage, "seed": seed, "alpha": {"grpo": 1.0}.get(stage, 4.0 if "adrpo" in stage else None),
         "valid_rate": {a: 1.0 for a in AGENTS}, "cut_rate": {a: 0.0 for a in AGENTS},
         "reward_evidence": round(sum(per.values()) / len(per), 4), "reward_evidence_ci": [0.1, 0.5],
         "held_out_users": ["8", "9"], "held_out_sessions": len(per), "memory_score": 1.5,
         "memory_score_ci": [1.0, 2.0], "memory_score_cells": 5, "curve": [], "train_seconds": 600.0,
         "eval_seconds": 120.0, "session_reward_evidence": per}
    if not new_fields:
        return r
    rl = stage not in ("base", "sft")
    return r | {
        "attribution": "retrieval" if stage == "adrpo_retrieval" else "evidence" if rl else None,
        "reward_mode": "stale", "session_noop_evidence": {k: 0.1 for k in KEYS},
        "session_changed": {k: i < 4 for i, k in enumerate(KEYS)},
        "held_out_actions_changed": {a: _shares(0.5 if a == "semantic" else 0.25) for a in AGENTS},
        "held_out_quotes": {"core": {"quoted": 40, "missing": 14}, "episodic": {"quoted": 0, "missing": 0},
                            "semantic": {"quoted": 40, "missing": 40}, "procedural": {"quoted": 9, "missing": 0}},
        "held_out_edits_vs_expert": {
            "core": {"needed": 40, "edited": 33, "landed": 32, "not_needed": 8, "false": 0},
            "episodic": {"needed": 0, "edited": 0, "landed": 0, "not_needed": 48, "false": 0},
            "semantic": {"needed": 40, "edited": 31, "landed": 29, "not_needed": 8, "false": 3},
            "procedural": {"needed": 9, "edited": 8, "landed": None, "not_needed": 39, "false": 19}},
        "grounding": {"all": {"entries": 40, "grounded": 30, "grounded_rate": 0.75, "mean_share": 0.8},
                      "core": {"entries": 0, "grounded": 0, "grounded_rate": None, "mean_share": None},
                      **{a: {"entries": 10, "grounded": 10, "grounded_rate": 1.0, "mean_share": 1.0} for a in AGENTS[1:]}},
        "memory_accuracy": 0.41, "memory_accuracy_ci": [0.35, 0.47], "memory_upper_bound": 0.8, "memory_random": 0.25,
        "memory_questions": 240, "memory_score_cells_low_headroom": 2, "memory_score_seconds": 60.0,
        # each stage answers question i right when i % 4 < its level: GRPO seed 1 two more of every four than SFT
        "memory_correct": {f"u/0/q{i}": float(i % 4 < {"sft": 1, "grpo": 1 + seed}.get(stage, 1)) for i in range(40)},
        "time_split": {"generation_s": 300.0, "scoring_s": 60.0, "steps": 10} if rl else None,
        "real_grounding": {"sessions": 19, "outputs": 137, "all": {"entries": 30, "grounded": 27},
                           "dialogue": {"all": {"entries": 30, "grounded": 21}},
                           "distinct": {"entries": 12, "questions": 5, "shown": {"entries": 12, "grounded": 9},
                                        **({"unsaid": {"entries": 3, "ci": [0.09, 0.53],
                                                       "words": [["Carsmel", 3], ["Learning", 1]]}}
                                           if stage == "sft" else {}),
                                        "dialogue": {"entries": 12, "grounded": 6}},
                           "valid_rate": {a: 1.0 - 0.1 * (a == "core") for a in AGENTS},
                           **({"invalid": {"core": {"outputs": 14, "reasons": [
                               {"reason": "core: REPLACE needs 'new_text'", "outputs": 12},
                               {"reason": "invalid JSON: Unterminated string at char N", "outputs": 2}]},
                               **{a: {"outputs": 0, "reasons": []} for a in AGENTS[1:]}}} if stage == "sft" else {})},
        "train_signal": _signal() if rl else None,
        # SFT trained before machines were recorded; ADRPO seed 1 over two sittings on two machines
        "machines": None if stage == "sft" else [AMD, *([XEON] if (stage, seed) == ("adrpo", 1) else [])],
        # base's caches predate the record; GRPO seed 1 evaluated on the AMD machine, its conv-26 writes on the Xeon
        "evaluated_on": None if stage == "base" else (
            {"held_out": AMD_EVAL, "interactive": AMD_EVAL, "conv26": XEON_EVAL} if (stage, seed) == ("grpo", 1)
            else dict.fromkeys(("held_out", "interactive", "conv26"), XEON_EVAL)),
    }


def _rows(new_fields=True):
    return [_row("base", 0, -0.2, new_fields), _row("sft", 0, 0.0, new_fields),
            *(_row(stage, s, 0.05 * s, new_fields) for stage in ("grpo", "adrpo") for s in (0, 1)),
            _row("adrpo_retrieval", 0, 0.1, new_fields)]


def _table(text):
    return [line for line in text.splitlines() if line.startswith("|")]


def test_each_per_stage_table_reads_its_fields_within_80_columns():
    rows = _rows()
    for make, _ in stage_tables.STAGE_TABLES:
        lines = _table(make(rows))
        assert lines and max(map(len, lines)) <= 80, make.__name__
    assert "| adrpo_retrieval | 0 | 4 | 0.25 | 0.25 | 0.50 | 0.25 |" in stage_tables.edit_table(rows)
    assert "| sft | 0 | 26/40 | - | 0/40 | 9/9 |" in stage_tables.quotes_table(rows)  # none quoted: "-"
    # landed of needed, then false edits of the rest; no expert edit: "-"; quotes not checked: edits made
    assert "| sft | 0 | 32/40, 0/8 | -, 0/48 | 29/40, 3/8 | 8/9, 19/39 |" in stage_tables.expert_edit_table(rows)
    assert "| sft | 0 | 40 | 0.75 [0.60, 0.86] | - | 1.00 | 1.00 | 1.00 |" in stage_tables.grounding_table(rows)
    memory = stage_tables.memory_table(rows)
    assert "| grpo | 1 | 0.41 [0.35, 0.47] | 0.80 | 0.25 | 240 | 1.500 | 5 (2) |" in memory
    # paired with SFT question by question: seed 1 answers every question SFT does and 10 more of 40
    assert "- grpo seed 1 minus SFT, the same 40 questions: +0.250 [" in memory and "(above)" in memory
    assert "- grpo seed 0 minus SFT, the same 40 questions: +0.000 [+0.000, +0.000] (zero inside)" in memory
    assert "- sft seed" not in memory and "- base seed 0 minus SFT" in memory
    # RL: 10 min of training = 5 generating + 1 scoring + 4 the rest; SFT's training is all optimisation
    time = stage_tables.time_table(rows)
    assert "| adrpo | 0 | 10.0 | 5.0 | 1.0 | 4.0 | 3.0 |" in time and "| sft | 0 | 10.0 | - | - | 10.0 | 3.0 |" in time
    real = stage_tables.real_grounding_table(rows)
    assert "| sft | 0 | 19 (137) | 30 | 0.90 [0.74, 0.97] | 90/100/100/100 |" in real
    assert "- sft seed 0: 0.70 [0.52, 0.83] of 30 entries grounded in the dialogue alone" in real
    # each text once: 12 distinct entries, 5 of them questions
    assert ("distinct entries 12: 0.75 [0.47, 0.91] in what was shown, 0.50 [0.25, 0.75] in the dialogue alone, "
            "5 of them questions, 3 with a capitalised word never said in the dialogue so far (Carsmel 3x, "
            "Learning 1x)") in real
    assert "grpo seed 0: 0.70 [0.52, 0.83] of 30 entries grounded in the dialogue alone (every window and session " \
           "time so far, not the memory); distinct entries 12: 0.75 [0.47, 0.91] in what was shown, 0.50 [0.25, " \
           "0.75] in the dialogue alone, 5 of them questions\n" in real  # a row cached before the check
    # why the writes there were invalid, only for the agents with invalid outputs and the rows that recorded it
    assert ("- sft seed 0: core 14 (12 core: REPLACE needs 'new_text', 2 invalid JSON: Unterminated string at "
            "char N)") in real
    assert "grpo seed 0: core" not in real and "sft seed 0: episodic" not in real
    machines = stage_tables.machine_table(rows)
    assert "| sft | 0 | not recorded | - | - | - |" in machines and "\n| base |" not in machines
    assert "| adrpo | 1 | AMD EPYC 9R14 96-Core | AVX512-BF16 | 2 | float32 |\n| adrpo | 1 | Intel Xeon | AMX | 2 | bfloat16 |" in machines
    # where each evaluation ran, one line per machine; an interactive comparison across machines says so
    evaluated = stage_tables.evaluation_machine_table(rows)
    assert "| base | 0 | not recorded | - | - |" in evaluated and "| sft | 0 | Intel Xeon | AMX | all |" in evaluated
    assert ("| grpo | 1 | AMD EPYC 9R14 96-Core | AVX512-BF16 | held-out, interactive |\n"
            "| grpo | 1 | Intel Xeon | AMX | conv-26 |") in evaluated
    assert ("- grpo seed 1 minus SFT, the same 40 questions: +0.250 [+0.125, +0.375] (above); evaluated on different "
            "machines (Intel Xeon (AMX), AMD EPYC 9R14 96-Core (no AMX)), which alone can move this figure") in memory
    assert "(zero inside); evaluated" not in memory and "base seed 0 minus SFT" in memory  # base: not recorded
    dominant = stage_tables.dominant_table(rows)
    assert "| adrpo_retrieval | 0 | retrieval | 0% | 60% | 40% | 0% | 0% |" in dominant
    assert "| base |" not in dominant


def test_rows_written_before_the_new_fields_still_report():
    old = _rows(new_fields=False)
    assert stage_tables.edit_table(old) == stage_tables.grounding_table(old) == stage_tables.dominant_table(old) == ""
    assert stage_tables.quotes_table(old) == stage_tables.expert_edit_table(old) == stage_tables.machine_table(old) == ""
    assert "| sft | 0 | - | - | - | - | 1.500 | 5 |" in stage_tables.memory_table(old)
    assert "| adrpo | 1 | 10.0 | - | - | - | 2.0 |" in stage_tables.time_table(old)
    captions = [line for line in stage_tables.stage_tables(old) if line and not line.startswith("|")]
    assert len(captions) == 3  # validity, memory, time


def test_the_report_writes_the_pooled_summary_beside_the_rows(tmp_path):
    a = LadderArgs(results_dir=str(tmp_path))
    paths = report.write_results(a, _rows(), 1.0, [], {"sft": 600.0})
    rows = json.loads(paths["json"].read_text())
    assert isinstance(rows, list) and [r["stage"] for r in rows][:2] == ["base", "sft"]  # its readers' format
    summary = json.loads(paths["summary"].read_text())
    assert summary["stages"]["adrpo_retrieval"]["attribution"] == "retrieval"
    assert summary["differences"]["SFT - base"]["mean"] == pytest.approx(0.2)
    md = paths["md"].read_text()
    goals = md.split("Goals, read off the intervals:\n\n", 1)[1].splitlines()
    assert goals[0].startswith("- SFT > base, pooled over seeds and sessions: met")
    assert goals[3].startswith("- ADRPO-evidence vs GRPO (published order: alpha 4 above alpha 1)")
    assert any(g.startswith("- ADRPO_RETRIEVAL (alpha 4) seed 0 against SFT") for g in goals)
    assert "Each stage pooled over its seeds" in md and "Where the time went (min)" in md
    assert "The held-out reward answers in stale mode" in md
    # the old rows of an earlier ladder report as well
    report.write_results(a, _rows(new_fields=False), 1.0, [], {})
    assert json.loads(paths["summary"].read_text())["stages"]["grpo"]["gain"] is None


def test_only_make_ladders_own_command_is_called_what_make_ladder_runs():
    """A report names its command and said of every one that `make ladder` runs it, the told world's
    and the SFT ablations' too; only the Makefile's own command, output options aside, is that."""
    from pathlib import Path

    make = Path("Makefile").read_text(encoding="utf-8")
    assert f"-m {report.MAKE_LADDER.split(' -m ', 1)[1]}\n" in make
    plain = report.recipe_command(["--config", "configs/train/ladder_smollm2_cpu.yaml", "--work_dir", "w",
                                   "--results_dir=r", "--adapter_out", "null"])
    assert plain == report.MAKE_LADDER
    told = report.recipe_command(["--config", "configs/train/ladder_smollm2_cpu.yaml", "--env_config",
                                  "configs/env/construction_cpu_change_told.yaml", "--work_dir", "w"])
    assert told != report.MAKE_LADDER
