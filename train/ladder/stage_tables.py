"""The ladder report's per-stage tables: validity, edits where values changed, grounding (held-out and on a
real dialogue), the interactive evaluation, where the time went and the dominant memory under each rule; each
fits 80 columns, so a log or a terminal shows every figure whole."""

from __future__ import annotations

import json
from typing import Any

from membuilder.memory.ops import AGENTS
from membuilder.plumbing import stats
from memgym_env.benchmarks.grounding import invalid_phrases
from train.ladder.machine import across, short_cpu
from train.ladder.policy_actions import EDIT_NAMES
from train.ladder.rl_signal import ATTRIBUTION_TYPES
from train.ladder.settings import RL_STAGES


def _num(v, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _md(header: list[str], body: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(cells) + " |" for cells in body)])


def _count(v) -> str:
    return "-" if v is None else str(int(v))


def _min(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def _changed(r: dict[str, Any]) -> int:
    """How many held-out sessions changed a state variable a question of theirs needs."""
    if r.get("session_changed"):
        return sum(bool(v) for v in r["session_changed"].values())
    return max((a.get("outputs", 0) for a in r["held_out_actions_changed"].values()), default=0)


def edit_table(rows: list[dict[str, Any]]) -> str:
    """Per row, each agent's share of held-out outputs that edit memory, on the sessions whose answers changed
    (where keeping memory current takes an edit)."""
    body = [[r["stage"], str(r["seed"]), str(_changed(r)),
             *(_num((r["held_out_actions_changed"].get(a) or {}).get("shares", {}).get("edit"), ".2f") for a in AGENTS)]
            for r in rows if r.get("held_out_actions_changed")]
    return _md(["stage", "seed", "changed", *AGENTS], body) if body else ""


def expert_edit_table(rows: list[dict[str, Any]]) -> str:
    """Per row and agent, its held-out edits against the expert's: landed (edited and found what it quoted) of the
    sessions where the expert edits that memory, then edits written where the expert edits none."""
    def cell(e: dict[str, Any] | None) -> str:
        if not e:
            return "-"
        hit = "-" if not e["needed"] else f"{e['landed'] if e['landed'] is not None else e['edited']}/{e['needed']}"
        return f"{hit}, {e['false']}/{e['not_needed']}"

    body = [[r["stage"], str(r["seed"]), *(cell(r["held_out_edits_vs_expert"].get(a)) for a in AGENTS)]
            for r in rows if r.get("held_out_edits_vs_expert")]
    return _md(["stage", "seed", *AGENTS], body) if body else ""


def quotes_table(rows: list[dict[str, Any]]) -> str:
    """Per row and agent, the quotes of existing memory in held-out edits that found it, of all quotes."""
    def cell(q: dict[str, int] | None) -> str:
        return "-" if not q or not q["quoted"] else f"{q['quoted'] - q['missing']}/{q['quoted']}"

    body = [[r["stage"], str(r["seed"]), *(cell(r["held_out_quotes"].get(a)) for a in AGENTS)]
            for r in rows if r.get("held_out_quotes")]
    return _md(["stage", "seed", *AGENTS], body) if body else ""


def validity_table(rows: list[dict[str, Any]]) -> str:
    """Per row, each agent's share of valid held-out outputs."""
    body = [[r["stage"], str(r["seed"]), *(_num((r.get("valid_rate") or {}).get(a), ".2f") for a in AGENTS)]
            for r in rows]
    return _md(["stage", "seed", *AGENTS], body) if body else ""


def _grounded(g: dict[str, Any] | None, interval: bool = False) -> str:
    if not g or not g.get("entries"):
        return "-"
    text = f"{g['grounded'] / g['entries']:.2f}"
    return text + (" [{:.2f}, {:.2f}]".format(*stats.wilson(g["grounded"], g["entries"])) if interval else "")


def grounding_table(rows: list[dict[str, Any]]) -> str:
    """Per row, the share of written entries grounded in what the writer saw: all memories with a Wilson
    interval, then each memory."""
    body = [[r["stage"], str(r["seed"]), str((r["grounding"].get("all") or {}).get("entries", 0)),
             _grounded(r["grounding"].get("all"), True), *(_grounded(r["grounding"].get(a)) for a in AGENTS)]
            for r in rows if r.get("grounding")]
    return _md(["stage", "seed", "n", "all [95% CI]", *AGENTS], body) if body else ""


def real_grounding_table(rows: list[dict[str, Any]]) -> str:
    """Per row, the same measure on a real dialogue no stage trained on (LoCoMo conv-26): what the policy writes
    there, not in its training world."""
    body = [[r["stage"], str(r["seed"]), str(g["sessions"]) + (f" ({g['outputs']})" if g.get("outputs") else ""),
             str(g["all"].get("entries", 0)),
             _grounded(g["all"], True), "/".join(f"{100 * g['valid_rate'][a]:.0f}" for a in AGENTS)]
            for r in rows if (g := r.get("real_grounding")) and g.get("all")]
    if not body:
        return ""
    dialogue = [f"- {r['stage']} seed {r['seed']}: {_grounded(d['all'], True)} of {d['all']['entries']} entries "
                "grounded in the dialogue alone (every window and session time so far, not the memory)"
                + _distinct(r["real_grounding"].get("distinct"))
                for r in rows if (d := (r.get("real_grounding") or {}).get("dialogue")) and d.get("all")]
    why = [f"- {r['stage']} seed {r['seed']}: " + "; ".join(lines)
           for r in rows if (lines := invalid_phrases((r.get("real_grounding") or {}).get("invalid")))]
    return _md(["stage", "seed", "sessions (writes)", "n", "grounded [95% CI]", "valid % C/E/S/P"], body) + (
        "\n\nAn invented entry copied into another memory is grounded in the memory shown, not in the dialogue:"
        "\n\n" + "\n".join(dialogue) if dialogue else "") + (
        "\n\nWhy writes there were invalid, per agent: its invalid outputs and their commonest first errors:"
        "\n\n" + "\n".join(why) if why else "")


def _distinct(d: dict[str, Any] | None) -> str:
    """Each text counted once: copies of one line do not weigh as many entries, and questions are named."""
    if not d or not d.get("entries"):
        return ""
    text = (f"; distinct entries {d['entries']}: {_grounded(d['shown'], True)} in what was shown, "
            f"{_grounded(d['dialogue'], True)} in the dialogue alone, {d['questions']} of them questions")
    if u := d.get("unsaid"):
        text += (f", {u['entries']} with a capitalised word never said in the dialogue so far"
                 + (" (" + ", ".join(f"{w} {n}x" for w, n in u["words"]) + ")" if u["words"] else ""))
    return text


def memory_table(rows: list[dict[str, Any]]) -> str:
    """Per row, the interactive evaluation: accuracy with its interval, its upper bound and chance, the questions,
    and the memory score with the cells it rests on and those left out for low headroom."""
    def cells(r):
        left = r.get("memory_score_cells_low_headroom")
        return _count(r.get('memory_score_cells')) + ("" if left is None else f" ({left})")

    def accuracy(r):
        ci = r.get("memory_accuracy_ci")
        return _num(r.get("memory_accuracy"), ".2f") + (" [{:.2f}, {:.2f}]".format(*ci) if ci else "")

    body = [[r["stage"], str(r["seed"]), accuracy(r), _num(r.get("memory_upper_bound"), ".2f"),
             _num(r.get("memory_random"), ".2f"), _count(r.get("memory_questions")), _num(r.get("memory_score")),
             cells(r)] for r in rows if r.get("memory_accuracy") is not None or r.get("memory_score") is not None]
    if not body:
        return ""
    table = _md(["stage", "seed", "accuracy [95% CI]", "bound", "random", "qs", "score", "cells (low)"], body)
    sft_row = next((r for r in rows if r["stage"] == "sft"), {})
    sft = sft_row.get("memory_correct")
    paired = []
    for r in rows:  # the same questions answered from this stage's memory and from SFT's
        if sft and r.get("memory_correct") and r["stage"] != "sft":
            d = stats.paired_difference(sft, r["memory_correct"])
            paired.append(f"- {r['stage']} seed {r['seed']} minus SFT, the same {d['n']} questions: {d['mean']:+.3f} "
                          f"[{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] ({stats.against_zero(d['ci'])})"
                          + _across(sft_row, r, "interactive"))
    return table + ("\n\nAccuracy paired against SFT's (95% bootstrap over questions, which come from few users and "
                    "periods: narrower than the evidence):\n\n" + "\n".join(paired) if paired else "")


def _where(r: dict[str, Any], part: str) -> dict[str, Any] | None:
    return (r.get("evaluated_on") or {}).get(part)


def _across(a: dict[str, Any], b: dict[str, Any], part: str) -> str:
    """The same recipe evaluated on two CPUs answered +0.183 [0.067, 0.300] more interactive questions
    (train.ladder.machine), so a comparison across machines says so."""
    return across(_where(a, part), _where(b, part))


EVALUATIONS = {"held_out": "held-out", "interactive": "interactive", "conv26": "conv-26"}


def evaluation_machine_table(rows: list[dict[str, Any]]) -> str:
    """Per row, the machines its evaluations ran on, one line per machine with the evaluations it made (``all``:
    held-out, interactive and conv-26); left out when no evaluation recorded it."""
    if not any(r.get("evaluated_on") for r in rows):
        return ""
    body = []
    for r in rows:
        groups: dict[str, tuple[dict[str, Any], list[str]]] = {}
        for part, m in (r.get("evaluated_on") or {}).items():
            if m:
                groups.setdefault(json.dumps(m, sort_keys=True), (m, []))[1].append(EVALUATIONS[part])
        if not groups:
            body.append([r["stage"], str(r["seed"]), "not recorded", "-", "-"])
        for m, parts in groups.values():
            body.append([r["stage"], str(r["seed"]), short_cpu(m.get("cpu", "?")), _bf16(m),
                         "all" if len(parts) == len(EVALUATIONS) else ", ".join(parts)])
    return _md(["stage", "seed", "cpu", "bf16", "evaluations"], body)


def time_table(rows: list[dict[str, Any]]) -> str:
    """Per row, minutes of training split into rollout generation, scoring and optimisation (the rest), and
    minutes of evaluation (held-out sessions and the memory score)."""
    body = []
    for r in rows:
        train, split = r.get("train_seconds"), r.get("time_split")
        evals = [r[k] for k in ("eval_seconds", "memory_score_seconds") if r.get(k) is not None]
        if train is None and not evals:
            continue
        gen, score = (split["generation_s"], split["scoring_s"]) if split else (None, None)
        rl = r["stage"] in RL_STAGES
        optimise = (train - gen - score if split else None) if rl else train
        body.append([r["stage"], str(r["seed"]), _min(train), _min(gen), _min(score),
                     _min(None if train is None else optimise), _min(sum(evals) if evals else None)])
    return _md(["stage", "seed", "train", "generation", "scoring", "optimisation", "evaluation"], body) if body else ""


def _bf16(m: dict[str, Any]) -> str:
    return "AMX" if m.get("amx") else "AVX512-BF16" if m.get("avx512_bf16") else "none"


def machine_table(rows: list[dict[str, Any]]) -> str:
    """Per trained row, the machine of each sitting (``train.ladder.machine``): CPU, its bf16 units, cores and
    the dtype of the policy's frozen base; a stage trained before machines were recorded says so."""
    trained = [r for r in rows if r["stage"] != "base"]
    if not any(r.get("machines") for r in trained):
        return ""
    body = []
    for r in trained:
        for m in r.get("machines") or [None]:
            if m is None:
                body.append([r["stage"], str(r["seed"]), "not recorded", "-", "-", "-"])
                continue
            body.append([r["stage"], str(r["seed"]), short_cpu(m.get("cpu", "?")), _bf16(m), _count(m.get("cores")),
                         m.get("base_dtype") or "-"])
    return _md(["stage", "seed", "cpu", "bf16", "cores", "base"], body)


def dominant_table(rows: list[dict[str, Any]]) -> str:
    """Per RL row and attribution rule, how often each memory type was the dominant one over the run's steps."""
    body = [[r["stage"], str(r["seed"]), rule, *(f"{shares.get(t, 0.0):.0%}" for t in ATTRIBUTION_TYPES)]
            for r in rows for rule, shares in sorted(((r.get("train_signal") or {}).get("dominant_by_rule")
                                                      or {}).items())]
    return _md(["stage", "seed", "rule", *ATTRIBUTION_TYPES], body) if body else ""


STAGE_TABLES = (
    (validity_table, "Valid outputs per agent, held-out:"),
    (edit_table, f"Share of held-out outputs that edit memory ({EDIT_NAMES}) on the sessions where a state "
                 "variable a question needs changed (`changed`: how many):"),
    (expert_edit_table, "Held-out edits against the expert's on the same sessions, per agent: `landed/needed`, the "
                        "sessions where the expert edits that memory and the stage's edit found what it quotes; "
                        "then `false/rest`, edits written where the expert edits none (a changed value is often "
                        "another memory's):"),
    (quotes_table, "Held-out edits that found the memory they quote (UPDATE and MERGE entries, Core REPLACE "
                   "text), of all quoted: a miss writes the new value beside the stale one, or changes nothing:"),
    (grounding_table, "Written entries grounded in the session, its time or the memory shown: grounded rate over `n` "
                      "entries, `all` with a 95% Wilson interval, then per memory:"),
    (real_grounding_table, "Grounding on a real dialogue (LoCoMo conv-26's first sessions, memory written in "
                           "order, a session longer than `write_window_tokens` window by window): entries grounded, "
                           "95% Wilson interval, and each agent's valid-JSON share of its writes (one per session or "
                           "window, in brackets):"),
    (memory_table, "Interactive memory evaluation: accuracy [95% Wilson], its upper bound (`bound`), chance "
                   "(`random`), questions (`qs`); the memory score and its cells, with those left out for "
                   "low headroom in brackets:"),
    (time_table, "Where the time went (min): training split into rollout generation, scoring and the rest "
                 "(optimisation), and evaluation (held-out sessions and memory score):"),
    (machine_table, "Machines each stage trained on, one line per sitting (`bf16`: the CPU's bfloat16 units; "
                    "`base`: the dtype of the frozen base weights under LoRA, bfloat16 only with AMX):"),
    (evaluation_machine_table, "Machines each stage was evaluated on: greedy decoding moves with the CPU, the "
                               "interactive and conv-26 figures most, since each step there reads what earlier "
                               "steps wrote (results/ladder-told-amd/README.md):"),
    (dominant_table, "Dominant memory type per step under each attribution rule (logged whichever rule sets "
                     "ADRPO's weights), share of rollouts averaged over steps:"),
)


def stage_tables(rows: list[dict[str, Any]]) -> list[str]:
    """The report's per-stage tables, each under its caption; a table with no row to show is left out."""
    out = []
    for make, caption in STAGE_TABLES:
        text = make(rows)
        if text:
            out += ["", caption, "", text]
    return out
