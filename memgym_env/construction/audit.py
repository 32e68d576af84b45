"""What MemoryGym-v0's reward sees on a world, measured by replaying the expert's trajectories.

For each reward setting (``config.REWARD_SETTINGS``: published and tracks_change) and each session:

(a) whether the expert's action scores above the same action with its edits made appends
    (``actions.updates_as_adds``, ``actions.replaces_as_appends``, and both), counted over the
    sessions where a variable one of the session's questions needs changed in that session and
    the expert made that kind of edit;
(b) the dominant memory under each attribution rule, for the expert's action, with the entropy
    of each distribution (bits);
(c) the rewards of writing nothing and of the expert, per period: the learnable share.

``bench/reward_audit.py`` runs it and writes ``bench/results/reward_audit.json``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from membuilder.plumbing.stats import bootstrap_ci, wilson
from membuilder.reward import ATTRIBUTION_RULES
from memgym_env.construction.actions import noop_action, replaces_as_appends, updates_as_adds
from memgym_env.construction.config import REWARD_SETTINGS, ConstructionConfig
from memgym_env.construction.scoring import SessionScorer
from memgym_env.construction.state_values import question_variables

EDITS = ("update_to_add", "replace_to_append", "both")
DOMINANT_NAMES = ("core", "episodic", "semantic", "procedural", "none")


def changed_in_session(scorer: SessionScorer, key: str) -> set[str]:
    """Variables whose value this session changed (revealed before with another value)."""
    ep, j = scorer.locate(key)
    known: dict[str, str] = {}
    changed: set[str] = set()
    for s in ep.conversation.sessions[:j + 1]:
        changed = set()
        for var, value in (s.meta.get("exposed_states") or {}).items():
            if var in known and known[var] != value:
                changed.add(var)
            known[var] = value
    return changed


def needs_changed_value(scorer: SessionScorer, key: str) -> bool:
    """Whether a variable one of the session's questions needs changed in this session: the sessions where
    memory must be edited, not only added to, to answer right."""
    ep, j = scorer.locate(key)
    needed = {v.name for q in ep.conversation.qa_for_session(ep.conversation.sessions[j].id)
              for v in question_variables(q)}
    return bool(changed_in_session(scorer, key) & needed)


def entropy(counts: Counter) -> float:
    n = sum(counts.values())
    return -sum(c / n * math.log2(c / n) for c in counts.values() if c) if n else 0.0


def audit_setting(scorer: SessionScorer, keys: Sequence[str], progress: Callable[[int], None] | None = None) -> dict:
    edits = {name: [0, 0] for name in EDITS}  # sessions where the edit applies, sessions where it lowered the reward
    dominant = {rule: Counter() for rule in ATTRIBUTION_RULES}
    periods: dict[int, dict[str, list[float]]] = {}
    for key in keys:
        expert = scorer.expert_action(key)
        variants = {"update_to_add": updates_as_adds(expert), "replace_to_append": replaces_as_appends(expert)}
        variants["both"] = updates_as_adds(variants["replace_to_append"])
        noop = noop_action(scorer.core_before(key))
        rewards = scorer.score(key, [expert, noop, *variants.values()])
        oracle, nothing, altered = rewards[0], rewards[1], dict(zip(variants, rewards[2:], strict=True))
        for rule in ATTRIBUTION_RULES:
            dominant[rule][oracle.dominant_by_rule.get(rule) or "none"] += 1
        row = periods.setdefault(scorer.period(key), {"noop": [], "oracle": [], "noop_task": [], "oracle_task": []})
        row["noop"].append(nothing.reward)
        row["oracle"].append(oracle.reward)
        row["noop_task"].append(nothing.task_reward)
        row["oracle_task"].append(oracle.task_reward)
        if needs_changed_value(scorer, key):
            for name, action in variants.items():
                if action != expert:
                    edits[name][0] += 1
                    edits[name][1] += altered[name].reward < oracle.reward
        if progress:
            progress(1)
    return {
        "edits_lower_reward": {name: {"sessions": n, "lowered": k, "share": k / n if n else None, "ci": wilson(k, n)}
                               for name, (n, k) in edits.items()},
        "dominant": {rule: {name: dominant[rule].get(name, 0) for name in DOMINANT_NAMES} for rule in dominant},
        "dominant_entropy_bits": {rule: abs(round(entropy(c), 3)) for rule, c in dominant.items()},
        "dominant_max_share": {rule: max((v for k, v in c.items() if k != "none"), default=0) / max(1, len(keys))
                               for rule, c in dominant.items()},
        "per_period": {str(p): {"sessions": len(r["noop"]), **{name: _mean_ci(v) for name, v in r.items()},
                                "gain_ceiling": _mean_ci([o - n for o, n in zip(r["oracle"], r["noop"], strict=True)])}
                       for p, r in sorted(periods.items())},
        "overall": {name: _mean_ci([x for r in periods.values() for x in r[name]])
                    for name in ("noop", "oracle", "noop_task", "oracle_task")},
    }


def _mean_ci(values: Sequence[float]) -> dict[str, Any]:
    return {"mean": round(sum(values) / len(values), 4) if values else None, "ci": bootstrap_ci(list(values)),
            "n": len(values)}


def audit(env_config: str | None, users: Sequence[int] | None, overrides: dict | None = None,
          settings: Sequence[str] = tuple(REWARD_SETTINGS), progress: Callable[[int], None] | None = None) -> dict:
    """The audit of every named reward setting on the world ``env_config`` (+ ``overrides``) names."""
    out: dict[str, Any] = {"env_config": env_config, "overrides": overrides or {}, "users": list(users or []),
                           "settings": {}}
    for name in settings:
        config = ConstructionConfig.from_yaml(env_config, **{**(overrides or {}), **REWARD_SETTINGS[name]})
        scorer = SessionScorer(config, users)
        keys = scorer.session_keys()
        out["sessions"] = len(keys)
        out["settings"][name] = {"fields": REWARD_SETTINGS[name], **audit_setting(scorer, keys, progress)}
    return out


def audit_table(result: dict) -> str:
    """The audit as a Markdown table a person reads."""
    lines = [f"{result['sessions']} sessions of users {result['users']} ({result['env_config']})", "",
             "| setting | edit | sessions | lowered | share [95% CI] |", "|---|---|---:|---:|---|"]
    for name, s in result["settings"].items():
        for edit, e in s["edits_lower_reward"].items():
            ci = e["ci"]
            share = f"{e['share']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"
            lines.append(f"| {name} | {edit} | {e['sessions']} | {e['lowered']} | {share} |")
    lines += ["", "| setting | rule | " + " | ".join(DOMINANT_NAMES) + " | entropy (bits) |",
              "|---|---|" + "---:|" * (len(DOMINANT_NAMES) + 1)]
    for name, s in result["settings"].items():
        for rule, counts in s["dominant"].items():
            lines.append(f"| {name} | {rule} | " + " | ".join(str(counts[d]) for d in DOMINANT_NAMES)
                         + f" | {s['dominant_entropy_bits'][rule]:.2f} |")
    lines += ["", "| setting | period | sessions | no-op reward | oracle reward | oracle gain |", "|---|---:|---:|---|---|---|"]
    for name, s in result["settings"].items():
        for p, r in s["per_period"].items():
            cells = [f"{r[k]['mean']:.3f} [{r[k]['ci'][0]:.3f}, {r[k]['ci'][1]:.3f}]" if r[k]["ci"] else
                     f"{r[k]['mean']:.3f}" for k in ("noop", "oracle", "gain_ceiling")]
            lines.append(f"| {name} | {p} | {r['sessions']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
