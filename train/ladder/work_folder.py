"""A ladder's work folder: the settings it was made with, which a rerun must share to resume it, and the SFT
stage an RL ablation takes from another ladder's folder (``--sft_from``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from membuilder.memory.ops import OPS_SCHEMA
from membuilder.plumbing.json_files import atomic_dir, write_json
from train.ladder.settings import OUTPUT_OPTIONS, RL_STAGES, LadderArgs, flatten, from_flat, is_flat

# Settings a work folder's stages and caches do not depend on: they may change between sittings.
# eval_engine is free because the evaluation caches are named by engine, eval_session_pick because each cached
# evaluation and curve point records its pick (one made with another is made again or left out); ``set`` is
# already in the mappings; the grounding measure on a real dialogue is cached per stage with its own settings.
FREE_SETTINGS = (*OUTPUT_OPTIONS, "seeds", "stage_seeds", "rl_stages", "rollout_logs", "eval_engine", "eval_session_pick",
                 "grounding_data", "grounding_sessions", "grounding_seeds", "write_window_tokens", "interactive_eval",
                 "set")
FREE_FIELDS = ("save_steps",)  # of any stage: how often it checkpoints

# Settings added after work folders were first made, with the value those folders ran under: a settings.json
# without one is read as having it (the committed ladder ran with VLLM_CPU_KVCACHE_SPACE=2).
ADDED_SETTINGS = {"vllm_kv_cache_gb": 2, "ops_schema": 1, "curve_pick": "first"}
# Stage overrides that set a field to the value its script takes without them: a folder made before the override
# existed and one that names it trained alike, so neither side of a comparison keeps it.
NO_OP_OVERRIDES = {"stages.sft.overrides.empty_memory_repeats": 1, "stages.sft.overrides.first_period_sessions": 0}


def _without_no_ops(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if not (k in NO_OP_OVERRIDES and v == NO_OP_OVERRIDES[k])}


def _free(key: str) -> bool:
    return key.startswith("stages.") and key.rsplit(".", 1)[-1] in FREE_FIELDS


def rl_only(key: str) -> bool:
    """Whether only the RL runs depend on a setting: a ladder may take its SFT stage from a work folder that
    differs in these alone."""
    # The parse rule (ops_schema) decides RL's rewards; SFT trains on the expert's outputs, valid under every rule,
    # and a cached evaluation made under another rule is scored again.
    return key in ("curve_every", "curve_sessions", "curve_pick", "ops_schema") or any(
        key.startswith(f"stages.{s}.") for s in RL_STAGES)


# Settings only the held-out evaluations depend on, never SFT's training: a ladder may take its SFT stage from a
# folder that evaluated on fewer held-out sessions, and an evaluation copied over other sessions is made again
# (``Evaluator.same_sessions`` compares the session keys).
EVAL_ONLY = ("eval_sessions_per_user",)


def sft_shared(key: str) -> bool:
    """Whether a ladder taking another's SFT stage (``--sft_from``) may differ in a setting."""
    return rl_only(key) or key in EVAL_ONLY


def work_settings(a: LadderArgs) -> dict[str, Any]:
    """What the stages and caches in ``work_dir`` depend on, one dotted name per field (``stages.sft.overrides.
    learning_rate``): the ladder's settings and the text of the stage and world configs they read."""
    out = flatten({k: v for k, v in asdict(a).items() if k not in FREE_SETTINGS})
    out["ops_schema"] = OPS_SCHEMA  # what parse accepts decides every reward: RL made under another rule is not resumed
    out["env_config_sha256"] = hashlib.sha256(Path(a.env_config).read_bytes()).hexdigest()
    for name, stage in a.stages.items():
        out[f"stages.{name}.config_sha256"] = hashlib.sha256(Path(stage["config"]).read_bytes()).hexdigest()
    return json.loads(json.dumps(_without_no_ops({k: v for k, v in out.items() if not _free(k)})))


def made_settings(path: Path) -> dict[str, Any]:
    """The settings a work folder was made with (``settings.json``) in today's names, settings added since
    filled in."""
    made = json.loads(path.read_text(encoding="utf-8"))
    if is_flat(made):
        made = from_flat(made)
    made = {**ADDED_SETTINGS, **made}
    return json.loads(json.dumps(_without_no_ops({k: v for k, v in made.items() if not _free(k)})))


def pin_engine(a: LadderArgs) -> None:
    """Give vLLM's CPU engine the ladder's KV cache size; the engines read it when they start."""
    before = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    if before is not None and before != str(a.vllm_kv_cache_gb):
        print(f"ladder: VLLM_CPU_KVCACHE_SPACE={before} in the environment; using the ladder's vllm_kv_cache_gb "
              f"{a.vllm_kv_cache_gb} so the results match the recipe's", file=sys.stderr)
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(a.vllm_kv_cache_gb)


def rl_started(work: Path, stage: str = "*") -> bool:
    """Whether an RL stage (any, by default) in ``work`` has begun under some seed: its folder
    (``seed<N>/<stage>``) holds a file."""
    return any(path.is_file() for run in work.glob(f"seed*/{stage}") for path in run.rglob("*"))


def _fixed_by_a_run(key: str, work: Path) -> bool:
    """Whether a run in ``work`` already depends on setting ``key``: one RL stage's own settings are fixed once
    that stage has begun under some seed, the settings every RL stage shares once any has."""
    if key.startswith("stages."):
        return rl_started(work, key.split(".")[1])
    return rl_started(work)


def check_work_dir(a: LadderArgs, work: Path) -> None:
    """A work folder resumes only under the settings that made it: its cached evaluations and trained
    stages are keyed by stage name alone, so other settings would mix stale results into the report."""
    path = work / "settings.json"
    now = work_settings(a)
    if path.exists():
        made = made_settings(path)
        changed = sorted(k for k in set(made) | set(now) if made.get(k) != now.get(k))
        if changed and all(rl_only(k) and not _fixed_by_a_run(k, work) for k in changed):
            # Nothing in the folder depends on a stage's RL settings until that stage begins: the recipe's RL
            # settings may still be chosen (by python -m train.ladder.sweep on this SFT stage) after SFT has
            # trained, and a stage not yet run may take a setting that another stage's runs have shown better.
            print(f"ladder: no run in {work} depends on these yet; taking them as they are now: "
                  + "; ".join(f"{k} {made.get(k)!r} -> {now.get(k)!r}" for k in changed), file=sys.stderr)
            if not a.report_only:
                write_json(path, now)
            return
        if changed:
            raise SystemExit(f"{work} was made with other settings ({path}): "
                             + "; ".join(f"{k} {made.get(k)!r} -> {now.get(k)!r}" for k in changed)
                             + ". Its stages and cached evaluations would not match them: set another work_dir, "
                               "or remove this one to start over.")
    elif not a.report_only:  # a report describes a folder; it does not claim one
        write_json(path, now)


def take_sft(a: LadderArgs, work: Path) -> None:
    """Start ``work`` from the finished SFT stage of the ladder in ``a.sft_from``: its adapter folder, its clock,
    and the base and SFT evaluations, copied once (a folder that has an SFT stage keeps it)."""
    src = Path(a.sft_from)
    made = src / "settings.json"
    if not made.exists():
        raise SystemExit(f"sft_from {src}: no settings.json there, so it is not a ladder's work folder")
    theirs, ours = made_settings(made), work_settings(a)
    changed = sorted(k for k in set(theirs) | set(ours) if not sft_shared(k) and theirs.get(k) != ours.get(k))
    if changed:
        raise SystemExit(f"sft_from {src} trained SFT or evaluated under other settings ({made}): "
                         + "; ".join(f"{k} {theirs.get(k)!r} there, {ours.get(k)!r} here" for k in changed)
                         + ". Only the RL settings may differ: stages." + ", stages.".join(RL_STAGES)
                         + ", curve_every, curve_sessions, curve_pick, and the held-out size (" + ", ".join(EVAL_ONLY) + ").")
    if not (src / "sft" / "policy" / "adapter" / "adapter_config.json").exists():
        raise SystemExit(f"sft_from {src}: its SFT stage has not finished (no sft/policy/adapter)")
    if (work / "sft").exists():
        return
    (work / "eval").mkdir(parents=True, exist_ok=True)
    for path in [*(src / "eval").glob("base*.json"), *(src / "eval").glob("sft*.json")]:
        if not (work / "eval" / path.name).exists():
            shutil.copy2(path, work / "eval" / path.name)
    if (src / "memory_score_world.json").exists() and not (work / "memory_score_world.json").exists():
        shutil.copy2(src / "memory_score_world.json", work / "memory_score_world.json")
    with atomic_dir(work / "sft") as partial:  # a copy cut short is never taken for a finished stage
        shutil.copytree(src / "sft", partial, ignore=shutil.ignore_patterns("checkpoint-*"), dirs_exist_ok=True)
