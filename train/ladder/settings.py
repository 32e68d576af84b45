"""The ladder's settings: ``LadderArgs``, read from ``configs/train/ladder_smollm2_cpu.yaml`` by TrlParser.

Each stage is its own entry point's config with the ladder's overrides on top, in that config's own field
names (``stages: {sft: {config: ..., overrides: {learning_rate: ...}}, adrpo: ..., grpo: ...}``). A few
settings are the ladder's, named once and set in every stage that reads them, since the evaluation reads
them too: the world (``env_config``, ``env_overrides``), the training users (each stage's ``users``), the
prompt budget (``max_prompt_tokens``) and the longest output (RL's ``max_completion_length``). Where a stage
writes and what it starts from are the ladder's business (``LADDER_SET``).

On the command line, ``--set PATH=VALUE`` changes one field inside a mapping, e.g. an ablation's alpha:

    python -m train.ladder --config configs/train/ladder_smollm2_cpu.yaml --rl_stages adrpo \\
        --set stages.adrpo.overrides.env_overrides.alpha=2 --seeds 0 --sft_from runs/ladder

Work folders made before the stages had their own overrides recorded flat names (``sft_learning_rate``,
``adrpo_alpha``, ...): ``from_flat`` reads them in today's terms.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from membuilder.reward import ALPHA
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.scoring import SESSION_PICKS

STAGES = ("base", "sft", "grpo", "adrpo", "adrpo_retrieval")  # every row's stage; the plots colour a stage by its place
# In the order each seed trains them. adrpo_retrieval is ADRPO under the published attribution rule (retrieval
# counts), beside adrpo's evidence rule: the rule is a stage's env_overrides.attribution.
RL_STAGES = ("adrpo", "grpo", "adrpo_retrieval")
# One context for the RL engine and the evaluation's: the ladder's longest prompt plus its longest output
# with room to spare.
ENGINE_CONTEXT = 2048

# Fields of a stage's config the ladder sets itself: what the stage starts from and where it writes (per
# stage and seed), and the ladder's settings the evaluation shares. A stage's overrides may not name them.
LADDER_SET = {
    "sft": ("model_name_or_path", "output_dir", "save_policy_to", "dataset_jsonl", "env_config", "users",
            "max_prompt_tokens"),
    "rl": ("model_name_or_path", "output_dir", "seed", "rollout_log", "env_config", "users", "max_prompt_tokens",
           "max_completion_length"),
}

# Where a ladder puts its outputs (or finds a finished SFT stage to reuse), not how it trains: the command and
# configuration shown with the results and the shipped adapter leave them out, so they read as the recipe rather
# than one machine's folders.
OUTPUT_OPTIONS = ("work_dir", "results_dir", "adapter_out", "report_only", "sft_from")

_RL_OVERRIDES = {
    "max_steps": 24,                # 24 steps x 4 sessions: a run of about an hour or more may span sittings ...
    "save_steps": 2,                # ... and resumes from its last checkpoint
    "save_strategy": "steps",
    "save_total_limit": 1,
    "max_sessions_per_user": None,  # RL samples any session of the training users
    "sessions_per_step": 4,         # 4 sessions x 4 agents x G completions per optimizer step
    "num_generations": 8,
    "per_device_train_batch_size": 8,  # = num_generations: one agent prompt per micro-batch
    "share_prompt": True,
    "share_prompt_rows": 2,         # a prompt's completions 2 at a time, shortest first (bench/shared_prompt_loss.py)
    "temperature": 0.8,             # MemBuilder's published sampling (at 1.0 GRPO dropped every Procedural edit)
    "top_p": 0.9,
    "vllm_importance_sampling_correction": False,  # vLLM's log-probs are after top-p; the trainer's are not
    "mask_truncated_completions": True,  # a cut completion stays out of the loss (a cut loop begins as a write does)
    "learning_rate": 3.0e-5,        # at 1e-4 without the biased correction the held-out curve fell within 6 steps
    "beta": 0.0,
    "use_vllm": True,               # rollouts from vLLM's CPU engine, colocated in the trainer
    "vllm_mode": "colocate",
    "vllm_max_model_length": ENGINE_CONTEXT,
}


CURVE_PICKS = ("spread", "first")


def _default_stages() -> dict[str, Any]:
    rl = {"config": "configs/train/adrpo_smollm2_cpu.yaml"}
    return {
        "sft": {"config": "configs/train/sft_smollm2_cpu.yaml", "overrides": {
            "seed": 0, "max_sessions_per_user": 20, "session_pick": "every_period", "num_train_epochs": 1.0,
            "learning_rate": 1.0e-3, "gradient_accumulation_steps": 4, "keep_empty_rows": 1.0,
            "drop_unseen_quotes": True, "empty_memory_repeats": 4, "save_strategy": "steps", "save_steps": 10,
            "save_total_limit": 1}},
        "adrpo": {**rl, "overrides": {**_RL_OVERRIDES, "env_overrides": {"alpha": ALPHA, "attribution": "evidence"}}},
        "grpo": {**rl, "overrides": {**_RL_OVERRIDES, "env_overrides": {"alpha": 1.0}}},
        "adrpo_retrieval": {**rl, "overrides": {**_RL_OVERRIDES, "env_overrides": {"alpha": ALPHA,
                                                                                  "attribution": "retrieval"}}},
    }


def _mapping(name: str, value: Any) -> dict[str, Any]:
    """A mapping field as given: a dict from a YAML file, or YAML/JSON text from the command line."""
    if isinstance(value, str):
        value = yaml.safe_load(value) or {}
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a mapping; got {value!r}")
    return copy.deepcopy(value)


def _value(text: str) -> Any:
    """A ``--set`` value: YAML (``2``, ``null``, ``true``, ``[0, 1]``), with ``1e-4`` read as a number (YAML 1.1
    wants ``1.0e-4``)."""
    value = yaml.safe_load(text)
    if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", value.strip()):
        return float(value)
    return value


@dataclass
class LadderArgs:
    """Defaults equal ``configs/train/ladder_smollm2_cpu.yaml`` (a test holds them together)."""

    model_name_or_path: str = field(default="smollm2-135m", metadata={"help": "Base policy; SFT starts from it."})
    env_config: str = field(default="configs/env/construction_cpu_change_varied.yaml", metadata={
        "help": "MemoryGym-v0 config (YAML) of every stage and of the evaluation."})
    # the mappings are typed str for the command line (YAML or JSON text there); a config file gives a mapping
    env_overrides: str = field(default_factory=dict, metadata={
        "help": "ConstructionConfig fields over env_config, for every stage (over each stage config's own "
                "env_overrides, under the stage's overrides) and the evaluation."})
    stages: str = field(default_factory=_default_stages, metadata={
        "help": "Per stage (sft and the RL stages adrpo, grpo, adrpo_retrieval): `config`, the entry point's YAML (train/sft.py's, train/adrpo.py's), "
                "and `overrides`, fields of that config set over it (a stage's env_overrides are merged key by key). "
                "Change one with --set stages.NAME.overrides.FIELD=VALUE."})
    train_users: str = field(default="0-7", metadata={"help": "Users whose sessions SFT and RL see (each stage's "
                                                              "`users`)."})
    held_out_users: str = field(default="8-15", metadata={"help": "Users only evaluated on."})
    eval_sessions_per_user: int = field(default=12, metadata={
        "help": "Held-out sessions of each held-out user (which: eval_session_pick)."})
    eval_session_pick: str = field(default="every_period", metadata={
        "help": "Which eval_sessions_per_user sessions of each held-out user are evaluated: 'every_period' (spread "
                "over every period, each period's earliest first: memory that must change, not only memory written "
                "from nothing) or 'first' (the first N, as ladders before it evaluated). Each cached evaluation "
                "records its pick; one made with another pick is made again."})
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={
        "help": "RL seeds (each RL stage's `seed`); SFT runs once, with its own config's seed, and every seed starts "
                "from it."})
    rl_stages: list[str] = field(default_factory=lambda: ["adrpo", "grpo", "adrpo_retrieval"], metadata={
        "help": "RL stages each seed runs, of adrpo (alpha 4, evidence attribution), grpo (alpha 1) and "
                "adrpo_retrieval (alpha 4, the published retrieval attribution); an ablation runs one. Runs the work "
                "folder already holds outside this selection are reported, not trained."})
    stage_seeds: str = field(default_factory=lambda: {"adrpo_retrieval": [0]}, metadata={
        "help": "Per RL stage, the seeds it runs when fewer than `seeds` (e.g. {adrpo_retrieval: [0]}); a stage not "
                "named runs every seed. Seeds can be added to a finished ladder: each (stage, seed) is its own run."})
    rollout_logs: bool = field(default=True, metadata={
        "help": "Write every scored RL completion (text, reward, weight, advantage) to <run>/rollouts.0.jsonl "
                "(each RL stage's `rollout_log`)."})
    eval_engine: str = field(default="vllm", metadata={
        "help": "What generates the stage evaluations (held-out sessions and the memory score's writer and answerer): "
                "'transformers' or 'vllm' (vLLM's CPU engine; run the ladder from .venv-vllm). Their caches are kept "
                "per engine. The curve points taken during RL come from the trainer's own vLLM engine when it has one "
                "and this is 'vllm', else from the trainer's model."})
    vllm_kv_cache_gb: int = field(default=2, metadata={
        "help": "KV cache of vLLM's CPU engine in GB, for the RL rollouts and the evaluations alike (the ladder sets "
                "$VLLM_CPU_KVCACHE_SPACE from it, over any value already there). It decides how requests are batched, "
                "and so, in bfloat16, some greedy outputs: a rerun reproduces the results with the same size."})
    sft_from: str | None = field(default=None, metadata={
        "help": "Work folder of another ladder to take the SFT stage from (its adapter and the base and SFT "
                "evaluations) instead of training it again; every setting SFT and the evaluations depend on must "
                "match that ladder's. An RL ablation (stages.adrpo/grpo) then costs its RL runs alone."})
    max_completion_tokens: int = field(default=256, metadata={
        "help": "Longest output per agent, in RL rollouts (each RL stage's `max_completion_length`) and the held-out "
                "evaluation alike; it must hold the oracle's longest output, or the policy is cut where the expert is "
                "not (the ladder reports how many oracle outputs would be)."})
    eval_batch_size: int = field(default=16, metadata={"help": "Prompts generated together."})
    max_prompt_tokens: int = field(default=640, metadata={
        "help": "Prompt budget (memory view cut first, what a writer must edit last) of SFT, RL (each stage's "
                "`max_prompt_tokens`) and the evaluation."})
    curve_every: int = field(default=6, metadata={"help": "Held-out reward every N RL steps (0: only at the end)."})
    curve_sessions: int = field(default=12, metadata={"help": "Held-out sessions of each curve point."})
    curve_pick: str = field(default="spread", metadata={
        "help": "Which curve_sessions held-out sessions each curve point scores: 'spread' (evenly spaced through the "
                "held-out list, so over users and periods) or 'first' (the list's first, i.e. its first users)."})
    choice_answerer: str | None = field(default=None, metadata={
        "help": "Answerer of choice-mode scoring (None: evidence mode only; choice mode costs model calls)."})
    grounding_data: str = field(default="../shared/data/locomo/locomo10_conv-26.json", metadata={
        "help": "A real conversation (LoCoMo JSON, its first conversation) each stage's policy writes memory over, "
                "to measure how much of what it writes is grounded there (memgym_env.benchmarks.grounding)."})
    grounding_sessions: int = field(default=19, metadata={
        "help": "Sessions of grounding_data written per stage (0: off); cached per stage like the other evaluations."})
    grounding_seeds: list[int] = field(default_factory=lambda: [0], metadata={
        "help": "RL seeds whose stages also write conv-26 (base and SFT always do): the goal is read on the shipped "
                "policy (a first seed), and in windows of 160 tokens conv-26 costs 13-21 minutes a stage on 2 cores, "
                "so further seeds skip it. A cached conv-26 result of another seed is still shown."})
    write_window_tokens: int | None = field(default=160, metadata={
        "help": "conv-26's writes: a session longer than this many tokens is written window by window, whole turns "
                "each, under the session's time (membuilder.agents.session_windows): the training world's sessions "
                "are at most about 160 tokens, conv-26's 487-1,586. None: every session whole, as published. Goes on "
                "the shipped policy's card, so `memgym evaluate` writes the same way. The memory score's sessions "
                "(at most 128 tokens) are never split, so it writes them whole."})
    memory_score_world: str = field(default_factory=lambda: {"num_users": 2, "num_periods": 2, "rounds_update": 1,
                                                               "seed": 4242}, metadata={
        "help": "World settings (over configs/env/base.yaml) of the interactive memory score; its users are never "
                "trained on. {} = off."})
    interactive_eval: bool = field(default=True, metadata={
        "help": "Score each stage in MemoryGym-Interactive-v0 (memory_score_world); off, a stage is judged on its "
                "held-out reward alone, as a sweep point is (the interactive score costs about 15-25 minutes a stage "
                "on 2 cores). Free to change: the cached scores stay and count again when it is back on."})
    adapter_out: str | None = field(default="membuilder/policies/smollm2-135m-memgym", metadata={
        "help": "Where the shipped policy goes (bf16, with card.json): the first seed of the stage with the best "
                "held-out reward pooled over seeds; None (or a ladder on another's SFT stage): not exported."})
    report_only: bool = field(default=False, metadata={
        "help": "Train and evaluate nothing: rewrite the results from the stages already finished in work_dir "
                "(a ladder stopped part-way reports what it has)."})
    work_dir: str = field(default="runs/ladder", metadata={"help": "Checkpoints and per-stage caches."})
    results_dir: str = field(default="results", metadata={"help": "Where ladder.json/.md/.png go."})
    set: list[str] = field(default_factory=list, metadata={
        "help": "PATH=VALUE changes inside the mappings above, applied in order, e.g. "
                "stages.adrpo.overrides.env_overrides.alpha=2 or env_overrides.view_k=8 (VALUE is YAML)."})

    def __post_init__(self) -> None:
        for name in ("env_overrides", "stages", "memory_score_world", "stage_seeds"):
            setattr(self, name, _mapping(name, getattr(self, name)))
        for change in self.set:
            self._apply(change)
        if self.curve_pick not in CURVE_PICKS:
            raise ValueError(f"curve_pick {self.curve_pick!r}; expected one of {CURVE_PICKS}")
        if self.eval_session_pick not in SESSION_PICKS:
            raise ValueError(f"eval_session_pick {self.eval_session_pick!r}; expected one of {SESSION_PICKS}")
        if self.eval_engine not in ("transformers", "vllm"):
            raise ValueError(f"eval_engine {self.eval_engine!r}: use 'transformers' or 'vllm'")
        if self.write_window_tokens is not None and self.write_window_tokens < 1:
            raise ValueError(f"write_window_tokens {self.write_window_tokens}: a window holds at least 1 token "
                             "(null writes every session whole)")
        if self.vllm_kv_cache_gb < 1:
            raise ValueError(f"vllm_kv_cache_gb {self.vllm_kv_cache_gb}: vLLM's CPU engine needs at least 1 GB")
        unknown = [s for s in self.rl_stages if s not in RL_STAGES]
        if unknown or len(set(self.rl_stages)) < len(self.rl_stages):
            raise ValueError(f"rl_stages {self.rl_stages}: name each of {list(RL_STAGES)} at most once")
        if "sft" not in self.stages or not set(self.stages) <= {"sft", *RL_STAGES}:
            raise ValueError(f"stages {sorted(self.stages)}: the ladder's stages are sft and any of {list(RL_STAGES)}")
        missing = [s for s in self.rl_stages if s not in self.stages]
        if missing:
            raise ValueError(f"rl_stages {missing}: no such entry under stages (give its config and overrides)")
        for name, seeds in self.stage_seeds.items():
            if name not in RL_STAGES or not isinstance(seeds, list):
                raise ValueError(f"stage_seeds.{name} {seeds!r}: name an RL stage ({list(RL_STAGES)}) and a list of "
                                 "seeds")
        for name, stage in self.stages.items():
            if not isinstance(stage, dict) or not stage.get("config") or not isinstance(stage.get("overrides", {}), dict):
                raise ValueError(f"stages.{name}: give `config` (a YAML path) and `overrides` (a mapping)")
            stage.setdefault("overrides", {})
            taken = sorted(set(stage["overrides"]) & set(LADDER_SET["sft" if name == "sft" else "rl"]))
            if taken:
                raise ValueError(f"stages.{name}.overrides {taken}: the ladder sets these itself (LADDER_SET)")
            if stage["overrides"].get("use_vllm") and stage["overrides"].get("vllm_max_model_length") != ENGINE_CONTEXT:
                raise ValueError(f"stages.{name}.overrides.vllm_max_model_length: the evaluation's engine has "
                                 f"{ENGINE_CONTEXT} tokens of context; give the RL engine the same")
        if self.adapter_out in ("", "null", "None", "none"):  # off from the command line
            self.adapter_out = None

    def _apply(self, change: str) -> None:
        path, sep, text = change.partition("=")
        keys = path.strip().split(".")
        if not sep or len(keys) < 2 or keys[0] not in ("env_overrides", "stages", "memory_score_world"):
            raise ValueError(f"--set {change!r}: give PATH=VALUE with PATH inside env_overrides, stages or "
                             "memory_score_world, e.g. stages.adrpo.overrides.learning_rate=3e-4")
        node = getattr(self, keys[0])
        for key in keys[1:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"--set {change!r}: {key} is not a mapping")
        node[keys[-1]] = _value(text)

    def construction_config(self, **extra) -> ConstructionConfig:
        return ConstructionConfig.from_yaml(self.env_config, **{**self.env_overrides, **extra})

    def stage_config(self, name: str) -> dict[str, Any]:
        """Stage ``name``'s config as its entry point reads it: its YAML, its overrides, then the ladder's shared
        settings (what it starts from and where it writes are added by ``sft_config`` and ``rl_config``)."""
        stage = self.stages[name]
        path = Path(stage["config"])
        base = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        overrides = dict(stage["overrides"])
        env = {**(base.get("env_overrides") or {}), **self.env_overrides, **(overrides.pop("env_overrides", None) or {})}
        shared = {"env_config": self.env_config, "env_overrides": env, "users": self.train_users,
                  "max_prompt_tokens": self.max_prompt_tokens}
        if name in RL_STAGES:
            shared["max_completion_length"] = self.max_completion_tokens
        return {**base, **overrides, **shared}

    def seeds_of(self, stage: str) -> list[int]:
        """The seeds RL stage ``stage`` runs: those of ``seeds`` its ``stage_seeds`` entry names, else every seed."""
        return [s for s in self.seeds if s in self.stage_seeds.get(stage, self.seeds)]

    def attribution(self, stage: str) -> str:
        """The attribution rule that names an RL stage's dominant memory (what alpha weights)."""
        return self.construction_config(**self.stage_config(stage)["env_overrides"]).attribution

    def credit(self, stage: str) -> str:
        """How an RL stage scores a session's completions: joint (MemBuilder's joint rollout) or per_agent."""
        return self.stage_config(stage).get("credit", "joint")

    def alpha(self, stage: str) -> float:
        """ADRPO's alpha in an RL stage (1: plain GRPO), from the stage's world settings."""
        return self.construction_config(**self.stage_config(stage)["env_overrides"]).alpha

    @property
    def sft_seed(self) -> int:
        return self.stage_config("sft")["seed"]

    @property
    def rl_engine(self) -> str:
        """What generates the RL rollouts: 'vllm' where an RL stage that runs uses vLLM, else 'transformers'."""
        return "vllm" if any(self.stage_config(s).get("use_vllm") for s in self.rl_stages) else "transformers"


def sft_config(a: LadderArgs, folder: Path) -> dict[str, Any]:
    """The SFT stage's config: from the base policy, writing into ``folder``."""
    return {**a.stage_config("sft"), "model_name_or_path": a.model_name_or_path, "output_dir": str(folder),
            "save_policy_to": str(folder / "policy"), "dataset_jsonl": str(folder / "sft_rows.jsonl")}


def rl_config(a: LadderArgs, stage: str, seed: int, start: str, folder: Path) -> dict[str, Any]:
    """An RL stage's config for ``seed``: continuing the adapter at ``start``, writing into ``folder``."""
    return {**a.stage_config(stage), "model_name_or_path": start, "seed": seed, "output_dir": str(folder),
            **({"rollout_log": str(folder / "rollouts")} if a.rollout_logs else {})}


def stage_argv(config: dict[str, Any], folder: Path) -> list[str]:
    """The command line of a stage: ``--config`` of its config written as ``folder/stage.yaml`` (typed values
    stay typed, and the folder records what the stage ran with)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "stage.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return ["--config", str(path)]


def sft_argv(a: LadderArgs, folder: Path) -> list[str]:
    return stage_argv(sft_config(a, folder), folder)


def rl_argv(a: LadderArgs, stage: str, seed: int, start: str, folder: Path) -> list[str]:
    return stage_argv(rl_config(a, stage, seed, start, folder), folder)


def parse_args(argv: list[str]) -> LadderArgs:
    """``LadderArgs`` from a command line (``--config`` YAML and flags over it); repeated ``--set`` flags add up."""
    from trl import TrlParser

    changes, rest, i = [], [], 0
    while i < len(argv):
        if argv[i] == "--set":
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                changes.append(argv[i])
                i += 1
            continue
        rest.append(argv[i])
        i += 1
    (a,) = TrlParser((LadderArgs,)).parse_args_and_config([*rest, *(["--set", *changes] if changes else [])])
    return a


# Old flat names of a work folder's settings.json, and where each lives now.
_RL = [f"stages.{s}" for s in ("adrpo", "grpo")]  # the RL stages of the flat-name era
OLD_NAMES = {
    "sft_config": ["stages.sft.config"],
    "adrpo_config": [f"{s}.config" for s in _RL],
    "sft_config_sha256": ["stages.sft.config_sha256"],
    "adrpo_config_sha256": [f"{s}.config_sha256" for s in _RL],
    "sft_seed": ["stages.sft.overrides.seed"],
    "sft_sessions_per_user": ["stages.sft.overrides.max_sessions_per_user"],
    "sft_epochs": ["stages.sft.overrides.num_train_epochs"],
    "sft_learning_rate": ["stages.sft.overrides.learning_rate"],
    "sft_gradient_accumulation_steps": ["stages.sft.overrides.gradient_accumulation_steps"],
    "sft_keep_empty_rows": ["stages.sft.overrides.keep_empty_rows"],
    "sft_save_steps": ["stages.sft.overrides.save_steps"],
    "rl_sessions_per_user": [f"{s}.overrides.max_sessions_per_user" for s in _RL],
    "rl_steps": [f"{s}.overrides.max_steps" for s in _RL],
    "rl_save_steps": [f"{s}.overrides.save_steps" for s in _RL],
    "rl_generations": [f"{s}.overrides.{k}" for s in _RL for k in ("num_generations", "per_device_train_batch_size")],
    "rl_temperature": [f"{s}.overrides.temperature" for s in _RL],
    "rl_learning_rate": [f"{s}.overrides.learning_rate" for s in _RL],
    "adrpo_alpha": ["stages.adrpo.overrides.env_overrides.alpha"],
    "rl_rollout_log": ["rollout_logs"],
}
# What the old ladder set in its stage command lines without a setting of its own.
OLD_FIXED = {
    "stages.sft.overrides.save_strategy": "steps", "stages.sft.overrides.save_total_limit": 1,
    "stages.grpo.overrides.env_overrides.alpha": 1.0,
    **{f"{s}.overrides.{k}": v for s in _RL for k, v in (
        ("save_strategy", "steps"), ("save_total_limit", 1), ("share_prompt", True),
        ("gradient_accumulation_steps", 4), ("top_p", 1.0), ("vllm_mode", "colocate"),
        ("vllm_max_model_length", ENGINE_CONTEXT))},
}


def flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}``: settings compared one field at a time."""
    out: dict[str, Any] = {}
    for key, v in value.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = v
    return out


def from_flat(old: dict[str, Any]) -> dict[str, Any]:
    """A settings.json written under the old flat names, in today's dotted names (``flatten`` of ``LadderArgs``)."""
    out = dict(OLD_FIXED)
    for key, value in old.items():
        if key == "rl_engine":  # the RL stages' use_vllm (vllm_mode and the context were fixed)
            out.update({f"{s}.overrides.use_vllm": value == "vllm" for s in _RL})
        elif key in OLD_NAMES:
            out.update({path: value for path in OLD_NAMES[key]})
        elif isinstance(value, dict):
            out.update(flatten(value, f"{key}."))
        else:
            out[key] = value
    return out


def is_flat(settings: dict[str, Any]) -> bool:
    """Whether a recorded settings.json predates the stages' overrides."""
    return any(key in OLD_NAMES or key == "rl_engine" for key in settings)
