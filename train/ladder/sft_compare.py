"""Two SFT stages side by side, read from their ladders' work folders: a change to SFT's recipe (another pick of
sessions, rows weighed otherwise) against the SFT it replaces, on the held-out sessions both were scored on.

    python -m train.ladder.sft_compare results/ladder-told/work results/ladder-told-adds/work \
        --out results/ladder-told-adds/sft_compare

Reads each folder's cached held-out evaluation (``eval/sft.<engine>.json``) and, where it has one, its conv-26
writes (``eval/sft-grounding.<engine>.json``). Reports per SFT the reward with its interval and each agent's
valid share with a Wilson interval and the commonest reasons for the invalid outputs; paired over the shared
sessions, the reward difference (second minus first) and per agent how many sessions turned valid and how many
invalid. The two stages' machines are named: bf16 kernels differ between CPUs, so stages trained on different
machines differ a little even under one recipe, and evaluated on different machines their interactive and
conv-26 figures differ much (train.ladder.machine); a comparison made across machines says so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from membuilder.memory.ops import AGENTS, parse
from membuilder.plumbing.stats import against_zero, bootstrap_ci, paired_difference, wilson
from memgym_env.benchmarks.grounding import InvalidOutputs, invalid_phrases
from train.ladder import machine


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"{path}: cannot read an SFT evaluation ({exc})") from exc


def sft_side(work: Path, engine: str) -> dict[str, Any]:
    """What one work folder's SFT stage did on its held-out sessions and on conv-26."""
    held = _load(work / "eval" / f"sft.{engine}.json")
    keys = held["session_keys"]
    rewards = dict(zip(keys, held["session_rewards"]["evidence"], strict=True))
    valid = {a: {} for a in AGENTS}
    invalid = {a: InvalidOutputs() for a in AGENTS}
    for k in keys:
        for a in AGENTS:
            p = parse(a, held["outputs"][k][a])
            valid[a][k] = p.valid
            if not p.valid:
                invalid[a].add(p.errors, held["outputs"][k][a])
    sittings = machine.read(work / "sft")
    side = {"work": str(work), "sessions": len(keys), "reward": sum(rewards.values()) / len(keys),
            "reward_ci": bootstrap_ci(list(rewards.values())), "session_rewards": rewards,
            "period_0": held.get("per_period", {}).get("evidence", {}).get("0"),
            "valid": {a: {"k": sum(v.values()), "n": len(v), "ci": wilson(sum(v.values()), len(v))}
                      for a, v in valid.items()},
            "session_valid": valid, "invalid": {a: invalid[a].to_dict() for a in AGENTS},
            "machine": sittings[-1] if sittings else None}
    memory = work / "eval" / f"sft-memory.{engine}.json"
    if memory.exists():
        m = _load(memory)
        side["interactive"] = {k: m.get(k) for k in ("memory_accuracy", "memory_accuracy_ci", "memory_questions",
                                                     "memory_upper_bound", "memory_random", "memory_correct",
                                                     "evaluated_on")}
    grounding = work / "eval" / f"sft-grounding.{engine}.json"
    if grounding.exists():
        g = _load(grounding)
        side["conv26"] = {"windows": g["outputs"], "valid_rate": g["valid_rate"], "entries": g["all"]["entries"],
                          "grounded_rate": g["all"]["grounded_rate"],
                          "dialogue_rate": ((g.get("dialogue") or {}).get("all") or {}).get("grounded_rate"), "invalid": g.get("invalid"),
                          "evaluated_on": g.get("evaluated_on")}
    return side


# the settings that make two folders' held-out sessions the same text under the same keys
HELD_OUT = ("env_config", "env_overrides", "held_out_users", "eval_sessions_per_user", "eval_session_pick",
            "max_prompt_tokens", "max_completion_tokens")


def world_differences(first: Path, second: Path) -> list[str]:
    """The held-out settings two work folders disagree on: sessions of two worlds share keys (the same users) but
    not their text, so nothing pairs across them."""
    a, b = (_load(w / "settings.json") for w in (first, second))
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in HELD_OUT if a.get(k) != b.get(k)]


def compare(first: dict[str, Any], second: dict[str, Any], differences: list[str] = ()) -> dict[str, Any]:
    if differences:
        return {"reward_second_minus_first": None, "valid_flips": None, "shared_sessions": 0,
                "not_paired": list(differences)}
    d = paired_difference(first["session_rewards"], second["session_rewards"])
    shared = sorted(first["session_rewards"].keys() & second["session_rewards"].keys())
    flips = {a: {"to_valid": sum(not first["session_valid"][a][k] and second["session_valid"][a][k] for k in shared),
                 "to_invalid": sum(first["session_valid"][a][k] and not second["session_valid"][a][k] for k in shared)}
             for a in AGENTS}
    asked = [(s.get("interactive") or {}).get("memory_correct") for s in (first, second)]
    q = paired_difference(*asked) if all(asked) else None
    return {"reward_second_minus_first": None if d is None else {**d, "reads": against_zero(d["ci"])},
            "valid_flips": flips, "shared_sessions": len(shared),
            "interactive_second_minus_first": None if q is None else {**q, "reads": against_zero(q["ci"])}}


def _ci(ci) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "[-]"


def _machine(side: dict[str, Any]) -> str:
    m = side.get("machine") or {}
    return f"{m.get('cpu', '?')} ({'AMX' if m.get('amx') else 'no AMX'}), base {m.get('base_dtype', '?')}"


def across(first: dict[str, Any], second: dict[str, Any], part: str) -> str:
    """A note on comparing the two sides' ``part`` ("interactive", "conv26") where they ran on different machines,
    as the caches record it or, before they did, as the stages' training sittings suggest."""
    a, b = (first.get(part) or {}).get("evaluated_on"), (second.get(part) or {}).get("evaluated_on")
    if note := machine.across(a, b):
        return note
    if machine.same_machine(a, b) is None and machine.same_machine(first.get("machine"), second.get("machine")) is False:
        return (f"; trained on different machines ({machine.label(first.get('machine'))}, "
                f"{machine.label(second.get('machine'))}) and evaluated where not recorded: the machine alone can "
                "move this figure")
    return ""


def lines(first: dict[str, Any], second: dict[str, Any], result: dict[str, Any]) -> list[str]:
    out = []
    for name, s in (("first", first), ("second", second)):
        valid = ", ".join(f"{a} {v['k']}/{v['n']} {_ci(v['ci'])}" for a, v in s["valid"].items())
        p0 = s.get("period_0") or {}
        out.append(f"{name} ({s['work']}; {_machine(s)}): reward {s['reward']:.3f} {_ci(s['reward_ci'])} over "
                   f"{s['sessions']} sessions (period 0: {p0.get('reward', float('nan')):.3f} over "
                   f"{p0.get('sessions', 0)}); valid {valid}")
        why = invalid_phrases(s["invalid"])
        out.append(f"  invalid: {'; '.join(why) if why else 'none'}")
        if c := s.get("conv26"):
            out.append(f"  conv-26 ({c['windows']} windows): valid " + "/".join(f"{100 * c['valid_rate'][a]:.0f}"
                       for a in AGENTS) + f" % C/E/S/P; {c['entries']} entries, grounded {c['grounded_rate']:.2f}"
                       + (f", in the dialogue alone {c['dialogue_rate']:.2f}" if c.get("dialogue_rate") is not None
                          else ""))
            if why := invalid_phrases(c.get("invalid")):
                out.append(f"  conv-26 invalid: {'; '.join(why)}")
        if i := s.get("interactive"):
            out.append(f"  interactive: accuracy {i['memory_accuracy']:.2f} {_ci(i['memory_accuracy_ci'])} of "
                       f"{i['memory_questions']} questions (upper bound {i['memory_upper_bound']:.2f}, chance "
                       f"{i['memory_random']:.2f}; the bound is the answerer's, so it moves with the machine)")
    if result.get("not_paired"):
        return [*out, "not paired: the folders' held-out sessions differ (" + "; ".join(result["not_paired"]) + ")"]
    d = result["reward_second_minus_first"]
    out.append("second - first, paired: " + (f"{d['mean']:+.3f} {_ci(d['ci'])} over {d['n']} sessions ({d['reads']})"
                                             if d else "no shared sessions"))
    if q := result.get("interactive_second_minus_first"):
        out.append(f"interactive, paired by question: {q['mean']:+.3f} {_ci(q['ci'])} over {q['n']} ({q['reads']})"
                   + across(first, second, "interactive"))
    if first.get("conv26") and second.get("conv26") and (note := across(first, second, "conv26")):
        out.append("conv-26" + note.replace("; ", ": ", 1))
    out.append("sessions turned valid / invalid: " + ", ".join(
        f"{a} +{f['to_valid']}/-{f['to_invalid']}" for a, f in result["valid_flips"].items()))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("first", type=Path, help="the work folder of the SFT read against (a ladder's --work_dir)")
    p.add_argument("second", type=Path, help="the work folder of the SFT recipe under test")
    p.add_argument("--engine", default="vllm", help="which evaluation cache to read (the ladder's eval_engine)")
    p.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md")
    args = p.parse_args(argv)
    first, second = sft_side(args.first, args.engine), sft_side(args.second, args.engine)
    result = compare(first, second, world_differences(args.first, args.second))
    text = lines(first, second, result)
    print("\n".join(text))
    full = {"first": {k: v for k, v in first.items() if k not in ("session_valid",)},
            "second": {k: v for k, v in second.items() if k not in ("session_valid",)}, **result}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(full, indent=1) + "\n", encoding="utf-8")
        args.out.with_suffix(".md").write_text(
            f"SFT of `{args.second}` against SFT of `{args.first}` (95% bootstrap intervals over sessions, "
            "Wilson intervals for valid shares):\n\n" + "".join(f"- {x}\n" for x in text), encoding="utf-8")
    return full


if __name__ == "__main__":
    main()
