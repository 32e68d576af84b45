"""RL stages of several ladders side by side: an ablation made with ``--sft_from`` against the ladder it
started from, every pair paired over the held-out sessions both were scored on.

    python -m train.ladder.compare results/ladder-published/ladder.json results/ladder-alpha2/ladder.json \
        --out results/ladder-alpha2/compare

Each RL row (a stage, its alpha and a seed) is read against SFT and against every other RL row of the same
seed; the pairing takes out the sessions' difficulty, which dominates a single stage's interval. Ladders
compare only when they share their SFT stage (its per-session rewards are equal), which ``--sft_from``
guarantees. Writes ``<out>.json`` and ``<out>.md`` and prints the lines.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from membuilder.plumbing.stats import against_zero
from train.ladder.report import _ci, _name, paired_difference


def load(paths: list[Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The shared SFT row and every RL row of ``paths``, each RL row once (by stage, alpha, credit and seed)."""
    sft, rl, seen = None, [], {}
    for path in paths:
        rows = json.loads(path.read_text(encoding="utf-8"))
        mine = next((r for r in rows if r["stage"] == "sft"), None)
        if mine is None:
            raise SystemExit(f"{path}: no sft row; a ladder reports one once its SFT stage is evaluated")
        if sft is None:
            sft = mine
        elif mine.get("session_reward_evidence") != sft.get("session_reward_evidence"):
            raise SystemExit(f"{path}: its SFT stage scored other rewards than {paths[0]}'s: the ladders do not "
                             "share an SFT stage (make the ablation with --sft_from)")
        for r in rows:
            if r["stage"] in ("base", "sft"):
                continue
            if r.get("alpha") is None:
                raise SystemExit(f"{path}: row {r['stage']} seed {r['seed']} has no alpha (made before rows kept it; "
                                 "rewrite it with python -m train.ladder --report_only true)")
            key = (r["stage"], r["alpha"], r.get("credit") or "joint", r["seed"])
            if key in seen:
                raise SystemExit(f"{path}: {_name(r)} seed {r['seed']} is also in {seen[key]}")
            seen[key] = path
            rl.append(r)
    return sft, rl


def _paired(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """``b - a`` paired over their shared sessions, with the word the ladder's report uses for its interval."""
    d = paired_difference(a, b)
    if d is None:
        return None
    return {**d, "reads": against_zero(d["ci"])}


def compare(sft: dict[str, Any], rl: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [{"name": f"{_name(r)} seed {r['seed']}", "stage": r["stage"], "alpha": r["alpha"], "seed": r["seed"],
             "reward_evidence": r["reward_evidence"], "reward_evidence_ci": r["reward_evidence_ci"],
             "minus_sft": _paired(sft, r)} for r in rl]
    pairs = []  # the later row minus the earlier one: an ablation's ladder is named after the one it started from
    for i in range(len(rl)):
        for j in range(i + 1, len(rl)):
            if rl[i]["seed"] == rl[j]["seed"]:
                pairs.append({"a": rows[j]["name"], "b": rows[i]["name"], "a_minus_b": _paired(rl[i], rl[j])})
    return {"sft": {"reward_evidence": sft["reward_evidence"], "reward_evidence_ci": sft["reward_evidence_ci"]},
            "rows": rows, "pairs": pairs}


def _line(d: dict[str, Any] | None) -> str:
    if d is None:
        return "no shared sessions"
    return f"{d['mean']:+.3f} {_ci(d['ci'])} over {d['sessions']} sessions ({d['reads']})"


def lines(result: dict[str, Any]) -> list[str]:
    s = result["sft"]
    out = [f"SFT: {s['reward_evidence']:.3f} {_ci(s['reward_evidence_ci'])}"]
    out += [f"{r['name']}: {r['reward_evidence']:.3f} {_ci(r['reward_evidence_ci'])}; minus SFT, paired: "
            f"{_line(r['minus_sft'])}" for r in result["rows"]]
    out += [f"{p['a']} - {p['b']}, paired: {_line(p['a_minus_b'])}" for p in result["pairs"]]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ladders", nargs="+", type=Path, help="ladder.json files whose ladders share an SFT stage")
    p.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md")
    args = p.parse_args(argv)
    for path in args.ladders:
        if not path.exists():
            raise SystemExit(f"{path}: no such ladder.json")
    result = compare(*load(args.ladders))
    text = lines(result)
    print("\n".join(text))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        args.out.with_suffix(".md").write_text(
            "Held-out evidence reward of " + ", ".join(f"`{p}`" for p in args.ladders)
            + " (95% bootstrap intervals over sessions):\n\n" + "".join(f"- {x}\n" for x in text), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
