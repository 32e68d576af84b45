"""How much of each agent's RL reward is its own: an RL run's logged rollouts scored both ways.

    python -m train.ladder.credit_check results/ladder-change/work/seed0/grpo   # <run>/credit_check.{json,md}

MemBuilder's joint rollout scores rollout k from every agent's k-th completion, so an agent's G rewards
also carry the other three agents' samples; per-agent credit (``ADRPOConfig.credit = "per_agent"``) writes
each agent's completion beside the expert's other three outputs. This re-scores every whole session of a
run's rollout log (the run's own ``stage.yaml``: its world, reward settings and users) under the credit
it did not train with, checks that its own credit reproduces the logged rewards, and reports per agent:

* the share of groups (one step, session and agent) whose G rewards all tie: no gradient;
* on the sessions where a value a question needs changed, the reward of an edit that found the memory
  it quotes minus that of new memory only, within the groups that sampled both (95% bootstrap over
  groups): how strongly each credit rewards tracking the change rather than writing beside it.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

from membuilder.memory.ops import AGENTS, OPS_SCHEMA
from membuilder.plumbing.json_files import atomic_write_text, write_json
from membuilder.plumbing.stats import bootstrap_ci
from membuilder.training.trl_reward import CREDITS
from memgym_env.construction.audit import needs_changed_value
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SessionScorer
from memgym_env.world.user_ranges import parse_users
from train.ladder.policy_actions import kind
from train.ladder.rl_signal import read_rollouts

TOLERANCE = 1e-6  # logged rewards are floats written as JSON: equal within this


def run_scorer(folder: Path) -> tuple[SessionScorer, str]:
    """The scorer of the sessions an RL run trained on, and the credit it trained with, from its ``stage.yaml``."""
    path = folder / "stage.yaml"
    if not path.exists():
        raise SystemExit(f"{folder}: no stage.yaml (an RL run's folder written by train/adrpo.py or the ladder)")
    stage = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if stage.get("scorer", "env") != "env" or not stage.get("env_config"):
        raise SystemExit(f"{path}: the run was not scored by a MemoryGym-v0 env config")
    config = ConstructionConfig.from_yaml(stage["env_config"], **dict(stage.get("env_overrides") or {}))
    users = parse_users(str(stage["users"]), what=f"{path}: users") if stage.get("users") is not None else None
    return SessionScorer(config, users), stage.get("credit", "joint")


def _kind(agent: str, text: str, quoted: tuple[int, int]) -> str:
    """``policy_actions.kind``, with an edit told apart by whether it found the memory it quotes."""
    k = kind(agent, text)
    return k if k != "edit" else "edit_found" if quoted[0] > quoted[1] else "edit_missing"


def _sessions(records: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, list[dict[str, Any]]]]:
    """(step, session) -> agent -> that agent's records in k order, for the sessions logged whole."""
    by: dict[tuple[int, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        by[(r["step"], r["session"])][r["agent"]].append(r)
    whole = {}
    for key, agents in by.items():
        if set(agents) == set(AGENTS) and len({len(v) for v in agents.values()}) == 1:
            whole[key] = {a: sorted(v, key=lambda r: r["k"]) for a, v in agents.items()}
    return whole


def credit_check(folder: Path, scorer: SessionScorer | None = None, trained: str | None = None) -> dict[str, Any]:
    """The comparison for the run in ``folder`` (``scorer`` and ``trained``: what ``run_scorer`` reads)."""
    if scorer is None:
        scorer, trained = run_scorer(folder)
    trained = trained or "joint"
    if trained not in CREDITS:
        raise SystemExit(f"{folder}: credit {trained!r} is not one of {CREDITS}")
    records = read_rollouts(folder)
    if any(r.get("k") is None for r in records):
        raise SystemExit(f"{folder}: the rollout log has no completion index k (written before it was logged)")
    sessions = _sessions(records)
    if not sessions:
        raise SystemExit(f"{folder}: no session logged whole (four agents, G completions each)")
    tied = {c: defaultdict(list) for c in CREDITS}
    gaps = {c: defaultdict(list) for c in CREDITS}
    reproduced = [0, 0]
    for (_step, key), agents in tqdm(sorted(sessions.items()), desc="re-scoring sessions", unit="session"):
        g = len(agents[AGENTS[0]])
        expert = scorer.expert_action(key)
        joint = scorer.score(key, [{a: agents[a][k]["completion"] for a in AGENTS} for k in range(g)])
        changed = needs_changed_value(scorer, key)
        for a in AGENTS:
            alone = scorer.score(key, [{**expert, a: agents[a][k]["completion"]} for k in range(g)])
            rewards = {"joint": [c.agent_rewards[a] for c in joint], "per_agent": [c.agent_rewards[a] for c in alone]}
            logged = [r["reward"] for r in agents[a]]
            reproduced[0] += sum(abs(x - y) <= TOLERANCE for x, y in zip(rewards[trained], logged, strict=True))
            reproduced[1] += g
            # an edit's quote is looked up in the snapshot, which both credits share: per-agent scoring reads it alone
            kinds = [_kind(a, agents[a][k]["completion"], tuple(alone[k].info["quoted"][a])) for k in range(g)]
            for c in CREDITS:
                tied[c][a].append(max(rewards[c]) - min(rewards[c]) <= TOLERANCE)
                edits = [x for x, kd in zip(rewards[c], kinds, strict=True) if kd == "edit_found"]
                new = [x for x, kd in zip(rewards[c], kinds, strict=True) if kd == "new"]
                if changed and edits and new:
                    gaps[c][a].append(sum(edits) / len(edits) - sum(new) / len(new))
    out = {"run": str(folder), "trained_credit": trained, "sessions": len(sessions), "ops_schema": OPS_SCHEMA,
           "logged_rewards_reproduced": {"equal": reproduced[0], "of": reproduced[1]}, "credits": {}}
    for c in CREDITS:
        out["credits"][c] = {a: {"groups": len(tied[c][a]), "tied_share": round(sum(tied[c][a]) / len(tied[c][a]), 4),
                                 "edit_minus_new": {"groups": len(gaps[c][a]),
                                                    "mean": round(sum(gaps[c][a]) / len(gaps[c][a]), 4)
                                                    if gaps[c][a] else None,
                                                    "ci": bootstrap_ci(gaps[c][a]) if gaps[c][a] else None}}
                             for a in AGENTS}
    return out


def table(result: dict[str, Any]) -> str:
    """The comparison as Markdown: one row per agent, both credits side by side."""
    rep = result["logged_rewards_reproduced"]
    lines = [f"{result['run']}: {result['sessions']} sessions logged whole, trained with {result['trained_credit']} "
             f"credit; its logged rewards reproduced {rep['equal']} of {rep['of']} (outputs parsed under rule "
             f"{result.get('ops_schema', 1)}, `OPS_SCHEMA`: a run trained under another rule reproduces fewer).", "",
             "Edit that found its entry minus new memory, within a group, on sessions where a needed value "
             "changed (mean [95% CI], groups); groups whose rewards all tie:", "",
             "| agent | joint: edit - new | per agent: edit - new | joint: tied | per agent: tied |",
             "|---|---|---|---:|---:|"]
    for a in AGENTS:
        cells = []
        for c in CREDITS:
            g = result["credits"][c][a]["edit_minus_new"]
            cells.append(f"{g['mean']:+.3f} [{g['ci'][0]:+.3f}, {g['ci'][1]:+.3f}] ({g['groups']})" if g["ci"] else
                         f"- ({g['groups']})")
        ties = [f"{result['credits'][c][a]['tied_share']:.2f}" for c in CREDITS]
        lines.append(f"| {a} | {cells[0]} | {cells[1]} | {ties[0]} | {ties[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="an RL run's folder: stage.yaml and rollouts.<process>.jsonl(.gz)")
    a = p.parse_args(argv)
    result = credit_check(a.run)
    text = table(result)
    print(text)
    write_json(a.run / "credit_check.json", result)
    atomic_write_text(a.run / "credit_check.md", text + "\n")
    print(f"written: {a.run / 'credit_check.json'}, {a.run / 'credit_check.md'}")
    return result


if __name__ == "__main__":
    main()
