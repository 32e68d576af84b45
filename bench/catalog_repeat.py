"""Can a writer score on MemoryGym-v0 by repeating the offline world's catalog? Fixed against varied wording.

    python bench/catalog_repeat.py        # held-out users 8-11, 12 sessions each -> bench/results/catalog_repeat.{json,md}
    python bench/catalog_repeat.py --users 8-9 --out /tmp/cr.json

Scores four writers with MemoryGym-v0's tracks_change reward (configs/env/construction_cpu_change.yaml)
on sessions of the chosen users drawn from every period, once on the world with the catalog's fixed wording and once
on the world of the same seed with ``wording: varied`` (same users, states, changes, sessions and
questions; other titles and value texts, said in the dialogue):

* ``noop``: writes nothing (the reward a session gives for free);
* ``oracle``: the world's own expert (memgym_env.world.oracle), which writes in the world's words;
* ``catalog``: the expert's very operations with every title and value text in the catalog's
  fixed wording, the targets of its UPDATEs and REPLACEs kept so they apply: a writer that knows
  what changed but says it as the catalog does - the most a catalog repeater can get;
* ``catalog_blind``: the same Semantic ADDs every session, of the catalog's most common
  (variable, value) phrasings among the training users (0-7), without reading the session.

For each: mean reward and task reward with 95% bootstrap intervals over sessions, the gain over
writing nothing (paired by session), the paired difference varied - fixed, and the grounding of
its written entries (membuilder.memory.grounding: share of content words found in the session
or in the memory the writer is shown), grounded count with its Wilson interval. No model is
loaded but the embedder. A few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from membuilder.agents.constructor import shown_texts  # noqa: E402
from membuilder.memory.grounding import Grounding, grounded_share, written_units  # noqa: E402
from membuilder.memory.ops import AGENTS, Add, CoreReplace, Update, parse, render_ops  # noqa: E402
from membuilder.plumbing.json_files import atomic_write_text, write_json  # noqa: E402
from membuilder.plumbing.stats import bootstrap_ci, paired_difference, wilson  # noqa: E402
from memgym_env.construction.actions import noop_action  # noqa: E402
from memgym_env.construction.config import ConstructionConfig  # noqa: E402
from memgym_env.construction.scoring import SessionScorer  # noqa: E402
from memgym_env.world import expert_steps, generate_world, load_config  # noqa: E402
from memgym_env.world.oracle import ExpertStep  # noqa: E402
from memgym_env.world.types import WorldUser  # noqa: E402
from memgym_env.world.user_ranges import parse_users  # noqa: E402

WRITERS = ("noop", "oracle", "catalog", "catalog_blind")
WORDINGS = ("fixed", "varied")
BLIND_LINES = 6
TRAIN_USERS = range(8)


def catalog_outputs(world_step: ExpertStep, catalog_step: ExpertStep) -> dict[str, str]:
    """The catalog-worded expert's outputs, with the world's targets for edits so they apply to the world's memory."""
    out = {}
    for agent in AGENTS:
        ops = []
        for w, c in zip(world_step.ops[agent], catalog_step.ops[agent], strict=True):
            if isinstance(c, Update):
                ops.append(Update(w.old_memory, c.new_memory))
            elif isinstance(c, CoreReplace):
                ops.append(CoreReplace(w.old_text, c.new_text))
            else:
                ops.append(c)
        out[agent] = render_ops(agent, ops)
    return out


def blind_lines(fixed_users: list[WorldUser], n: int = BLIND_LINES) -> list[str]:
    """The catalog's ``n`` most common "Title: value" lines over the training users' period states."""
    counts: Counter = Counter()
    for user in fixed_users:
        for period in user.periods:
            for var, value in period.state.items():
                info = user.variable_info[var]
                counts[f"{info.title}: {info.text(value)}"] += 1
    return [line for line, _ in counts.most_common(n)]


def _structure(user: WorldUser) -> list:
    return [(r.id, r.session.session_time, r.session.exposed_states) for r in user.sessions()]


def run(env_config: str, users: list[int], max_sessions: int | None = None, progress=None) -> dict:
    """The result for ``users`` (``max_sessions``: that many sessions per user, spread over the periods; None: all)."""
    base = yaml.safe_load(Path(env_config).read_text(encoding="utf-8"))
    world_overrides = dict(base.get("world_overrides") or {})
    if max(users) >= int(world_overrides.get("num_users", 20)):
        raise ValueError(f"--users {users}: the world of {env_config} has {world_overrides.get('num_users', 20)} users")
    worlds = {w: generate_world(load_config(base.get("world_config"), {**world_overrides, "wording": w}))
              for w in WORDINGS}
    for i in users:
        if _structure(worlds["fixed"][i]) != _structure(worlds["varied"][i]):
            raise AssertionError(f"user {i}: the varied world's sessions differ from the fixed world's")
    blind = blind_lines([worlds["fixed"][i] for i in TRAIN_USERS if i < len(worlds["fixed"].users)])
    blind_semantic = render_ops("semantic", [Add(line) for line in blind])

    result: dict = {"env_config": env_config, "users": users, "max_sessions_per_user": max_sessions, "blind_lines": blind, "wordings": {}}
    per_session: dict[str, dict[str, dict[str, float]]] = {}
    for wording in WORDINGS:
        config = ConstructionConfig.from_yaml(env_config, world_overrides={**world_overrides, "wording": wording})
        scorer = SessionScorer(config, users, max_sessions_per_user=max_sessions, pick="every_period")
        actions: dict[str, dict[str, dict[str, str]]] = {}
        for i in users:
            user = worlds[wording][i]
            twin = dataclasses.replace(user, variable_info=worlds["fixed"][i].variable_info)
            for step, cstep in zip(expert_steps(user), expert_steps(twin), strict=True):
                key = f"{user.id}/{step.session_id}"
                actions[key] = {"oracle": dict(step.outputs), "catalog": catalog_outputs(step, cstep)}
        keys = scorer.session_keys()
        if not set(keys) <= set(actions):
            raise AssertionError(f"{wording}: the scorer's sessions are not the world's")
        rewards = {w: {} for w in WRITERS}
        tasks = {w: {} for w in WRITERS}
        grounding = {w: Grounding() for w in WRITERS}
        for key in keys:
            core = scorer.core_before(key)
            acts = {"noop": noop_action(core), "oracle": actions[key]["oracle"], "catalog": actions[key]["catalog"],
                    "catalog_blind": {**noop_action(core), "semantic": blind_semantic}}
            if actions[key]["oracle"] != scorer.expert_action(key):
                raise AssertionError(f"{key}: the scorer's expert is not the world's oracle")
            scored = scorer.score(key, [acts[w] for w in WRITERS])
            obs = scorer.observation(key)
            sources = shown_texts(obs)
            for w, r in zip(WRITERS, scored, strict=True):
                rewards[w][key], tasks[w][key] = r.reward, r.task_reward
                if w == "noop":
                    continue
                for agent in AGENTS:
                    parsed = parse(agent, acts[w][agent])
                    if parsed.valid:
                        for unit in written_units(parsed.ops, core):
                            grounding[w].add(grounded_share(unit, sources))
            if progress:
                progress(1)
        per_session[wording] = rewards
        result["sessions"] = len(keys)
        result["wordings"][wording] = {w: {
            "reward": _mean_ci(rewards[w]), "task_reward": _mean_ci(tasks[w]),
            "gain_over_noop": paired_difference(rewards["noop"], rewards[w]),
            "grounding": {**grounding[w].to_dict(), "ci": wilson(grounding[w].grounded, grounding[w].entries)},
        } for w in WRITERS}
    result["varied_minus_fixed"] = {w: paired_difference(per_session["fixed"][w], per_session["varied"][w])
                                    for w in WRITERS}
    return result


def _mean_ci(values: dict[str, float]) -> dict:
    xs = list(values.values())
    return {"mean": round(sum(xs) / len(xs), 4) if xs else None, "ci": bootstrap_ci(xs), "n": len(xs)}


def _fmt(x: dict | None) -> str:
    if not x or x.get("mean") is None:
        return "-"
    ci = x.get("ci")
    return f"{x['mean']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{x['mean']:.3f}"


def table(result: dict) -> str:
    lines = [f"{result['sessions']} sessions (users {result['users']}) of {result['env_config']}, "
             "tracks_change reward; means with 95% bootstrap intervals over sessions, grounded entries with Wilson intervals", "",
             "| wording | writer | reward | task reward | gain over noop | grounded entries | grounded share [95% CI] |",
             "|---|---|---|---|---|---:|---|"]
    for wording, writers in result["wordings"].items():
        for w, r in writers.items():
            g = r["grounding"]
            share = (f"{g['grounded_rate']:.3f} [{g['ci'][0]:.3f}, {g['ci'][1]:.3f}]" if g["entries"] else "-")
            gain = r["gain_over_noop"]
            lines.append(f"| {wording} | {w} | {_fmt(r['reward'])} | {_fmt(r['task_reward'])} | {_fmt(gain)} | "
                         f"{g['grounded']}/{g['entries']} | {share} |")
    lines += ["", "| writer | reward varied - fixed (paired) | sessions |", "|---|---|---:|"]
    for w, d in result["varied_minus_fixed"].items():
        lines.append(f"| {w} | {_fmt(d)} | {d['n'] if d else 0} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-config", default="configs/env/construction_cpu_change.yaml",
                   help="MemoryGym-v0 config (tracks_change setting) whose world is generated in both wordings")
    p.add_argument("--users", default="8-11", help="users scored, e.g. 8-11 (held-out users of the ladder's world)")
    p.add_argument("--out", default="bench/results/catalog_repeat.json", help="JSON result; the table goes beside it (.md)")
    p.add_argument("--max-sessions-per-user", type=int, default=12,
                   help="score this many sessions per user, spread over its periods (0: all)")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    result = run(args.env_config, parse_users(args.users, what="--users"), args.max_sessions_per_user or None)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                         "load_1min": round(os.getloadavg()[0], 2)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, result)
    text = table(result)
    atomic_write_text(out.with_suffix(".md"), text + "\n")
    print(text)
    print(f"\nwrote {out} and {out.with_suffix('.md')} in {result['seconds']} s")
    return result


if __name__ == "__main__":
    main()
