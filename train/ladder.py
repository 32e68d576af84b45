"""Evidence that training works: base -> SFT -> SFT+ADRPO (alpha 4) and SFT+GRPO (alpha 1).

    make ladder                     # = python train/ladder.py --config configs/train/ladder_smollm2_cpu.yaml

For each seed, SFT on the world oracle's trajectories of the training users, then ADRPO and
plain GRPO from the SFT policy on the same users' sessions. Every stage is evaluated on
held-out users of the same world (never in SFT or RL data): greedy outputs for the four
agents of each session, the JSON validity rate per agent, and the mean session reward of
MemoryGym-v0 in ``evidence`` and ``choice`` answer modes.

Writes ``results/ladder.json`` (one row per stage and seed), ``results/ladder.md`` (table,
command, config, timings) and ``results/ladder.png``. Each finished stage is cached under
``work_dir`` so an interrupted ladder resumes where it stopped. The base model's row is
seed-independent (greedy decoding), so it is evaluated once and repeated per seed.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from membuilder.ops import AGENTS
from membuilder.training.policy_eval import evaluate_policy
from memgym_env.construction_config import ConstructionConfig
from memgym_env.session_scorer import SessionScorer
from train import adrpo, sft
from train.common import load_policy, parse_users  # noqa: E402

STAGES = ("base", "sft", "grpo", "adrpo")


@dataclass
class LadderArgs:
    """Defaults equal ``configs/train/ladder_smollm2_cpu.yaml`` (a test holds them together)."""

    model_name_or_path: str = field(default="smollm2-135m", metadata={"help": "Base policy."})
    sft_config: str = field(default="configs/train/sft_smollm2_cpu.yaml", metadata={"help": "SFT config (YAML)."})
    adrpo_config: str = field(default="configs/train/adrpo_smollm2_cpu.yaml", metadata={"help": "ADRPO config (YAML)."})
    env_config: str = field(default="configs/env/construction.yaml", metadata={"help": "MemoryGym-v0 config (YAML)."})
    env_overrides: str = field(default="{world_config: configs/env/base.yaml, world_overrides: {num_users: 10}}",
                               metadata={"help": "ConstructionConfig fields over env_config, for every stage and the "
                                                 "evaluation (YAML mapping; JSON on the command line)."})
    train_users: str = field(default="0-3", metadata={"help": "Users whose sessions SFT and RL see."})
    held_out_users: str = field(default="8-9", metadata={"help": "Users only evaluated on."})
    train_sessions_per_user: int = field(default=3, metadata={"help": "First N sessions of each training user."})
    eval_sessions_per_user: int = field(default=3, metadata={"help": "First N sessions of each held-out user."})
    seeds: list[int] = field(default_factory=lambda: [0, 1], metadata={"help": "Training seeds."})
    sft_epochs: float = field(default=3.0, metadata={"help": "SFT epochs over the oracle rows."})
    sft_learning_rate: float = field(default=5e-4, metadata={"help": "SFT learning rate (LoRA)."})
    sft_gradient_accumulation_steps: int = field(default=2, metadata={"help": "SFT steps per optimizer update."})
    rl_steps: int = field(default=4, metadata={"help": "ADRPO/GRPO optimizer steps (one session each)."})
    rl_generations: int = field(default=2, metadata={"help": "G, completions per agent prompt."})
    rl_learning_rate: float = field(default=1e-4, metadata={"help": "ADRPO/GRPO learning rate (LoRA)."})
    adrpo_alpha: float = field(default=4.0, metadata={"help": "alpha of the ADRPO stage (GRPO is alpha 1)."})
    eval_max_new_tokens: int = field(default=200, metadata={"help": "Longest evaluated output per agent."})
    eval_batch_size: int = field(default=8, metadata={"help": "Prompts generated together."})
    max_prompt_tokens: int = field(default=1536, metadata={"help": "Prompt budget (memory view cut first)."})
    choice_answerer: str = field(default="smollm2-135m", metadata={"help": "Answers questions in choice mode."})
    work_dir: str = field(default="runs/ladder", metadata={"help": "Checkpoints and per-stage caches."})
    results_dir: str = field(default="results", metadata={"help": "Where ladder.json/.md/.png go."})

    def __post_init__(self) -> None:
        if isinstance(self.env_overrides, str):
            self.env_overrides = yaml.safe_load(self.env_overrides) or {}


def _stage_env(a: LadderArgs, stage_config: str, **extra) -> list[str]:
    """The stage config's env settings with the ladder's on top, in the stages' own dialect."""
    stage = yaml.safe_load(Path(stage_config).read_text(encoding="utf-8")) or {}
    merged = {**(stage.get("env_overrides") or {}), **a.env_overrides, **extra}
    return ["--env_config", a.env_config, "--env_overrides", json.dumps(merged), "--users", a.train_users,
            "--max_sessions_per_user", str(a.train_sessions_per_user)]


def _train_once(folder: Path, run) -> str:
    """Run a training stage unless its merged policy is already there (a resumed ladder)."""
    merged = folder / "policy" / "merged"
    if not merged.exists():
        trainer = run()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1), encoding="utf-8")
        del trainer
        gc.collect()  # the next stage loads its own model; free this one first
    return str(merged)


def train_sft(a: LadderArgs, seed: int, folder: Path) -> str:
    return _train_once(folder, lambda: sft.main([
        "--config", a.sft_config, "--model_name_or_path", a.model_name_or_path, *_stage_env(a, a.sft_config),
        "--seed", str(seed), "--output_dir", str(folder), "--save_policy_to", str(folder / "policy"),
        "--dataset_jsonl", str(folder / "sft_rows.jsonl"), "--num_train_epochs", str(a.sft_epochs),
        "--learning_rate", str(a.sft_learning_rate), "--save_strategy", "no",
        "--gradient_accumulation_steps", str(a.sft_gradient_accumulation_steps)]))


def train_rl(a: LadderArgs, seed: int, start: str, alpha: float, folder: Path) -> str:
    g = a.rl_generations
    return _train_once(folder, lambda: adrpo.main([
        "--config", a.adrpo_config, "--model_name_or_path", start, *_stage_env(a, a.adrpo_config, alpha=alpha),
        "--seed", str(seed), "--output_dir", str(folder),
        "--save_policy_to", str(folder / "policy"), "--max_steps", str(a.rl_steps),
        "--num_generations", str(g), "--per_device_train_batch_size", str(4 * g),
        "--learning_rate", str(a.rl_learning_rate), "--save_strategy", "no",
        "--max_prompt_tokens", str(a.max_prompt_tokens)]))


class Evaluator:
    """Held-out sessions scored by MemoryGym-v0 in evidence and choice modes (built once)."""

    def __init__(self, a: LadderArgs):
        users = parse_users(a.held_out_users)

        def scorer(**mode):
            config = ConstructionConfig.from_yaml(a.env_config, **{**a.env_overrides, **mode})
            return SessionScorer(config, users, a.eval_sessions_per_user)

        self.scorers = {"evidence": scorer(answer_mode="evidence"),
                        "choice": scorer(answer_mode="choice", answerer=a.choice_answerer)}
        self.keys = self.scorers["evidence"].session_keys()
        self.users = sorted({k.split("/")[0] for k in self.keys})
        self.a = a

    def __call__(self, policy: str, label: str) -> dict[str, Any]:
        from tqdm.auto import tqdm

        # Evaluation trains nothing: the base may run in bfloat16 where the CPU has it.
        model, tokenizer, _ = load_policy(policy, "auto", frozen_base=True)
        bar = tqdm(total=4 * len(self.keys), desc=f"evaluate {label}", unit="output")
        t0 = time.perf_counter()
        res = evaluate_policy(model, tokenizer, self.scorers, self.keys, max_new_tokens=self.a.eval_max_new_tokens,
                              max_prompt_tokens=self.a.max_prompt_tokens, batch_size=self.a.eval_batch_size,
                              progress=bar.update)
        bar.close()
        res["eval_seconds"] = round(time.perf_counter() - t0, 1)
        del model
        gc.collect()
        return res


def _cached(path: Path, make):
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return value


def _row(stage: str, seed: int, res: dict[str, Any], users: list[str], seconds: float | None) -> dict[str, Any]:
    return {"stage": stage, "seed": seed, "valid_rate": res["valid_rate"], "reward_evidence": res["reward"]["evidence"],
            "reward_choice": res["reward"]["choice"], "task_reward_evidence": res["task_reward"]["evidence"],
            "task_reward_choice": res["task_reward"]["choice"], "held_out_users": users,
            "held_out_sessions": res["sessions"], "train_seconds": seconds, "eval_seconds": res.get("eval_seconds")}


def run(a: LadderArgs) -> list[dict[str, Any]]:
    work = Path(a.work_dir)
    evaluate = Evaluator(a)
    rows: list[dict[str, Any]] = []
    base = _cached(work / "eval" / "base.json", lambda: evaluate(a.model_name_or_path, "base"))
    timings = _cached(work / "timings.json", dict)
    for seed in a.seeds:
        rows.append(_row("base", seed, base, evaluate.users, None))
        d = work / f"seed{seed}"
        t = time.perf_counter()
        sft = train_sft(a, seed, d / "sft")
        timings.setdefault(f"sft/{seed}", round(time.perf_counter() - t, 1))
        res = _cached(work / "eval" / f"sft-{seed}.json", lambda p=sft, s=seed: evaluate(p, f"sft seed {s}"))
        rows.append(_row("sft", seed, res, evaluate.users, timings[f"sft/{seed}"]))
        for stage, alpha in (("grpo", 1.0), ("adrpo", a.adrpo_alpha)):
            t = time.perf_counter()
            policy = train_rl(a, seed, sft, alpha, d / stage)
            timings.setdefault(f"{stage}/{seed}", round(time.perf_counter() - t, 1))
            res = _cached(work / "eval" / f"{stage}-{seed}.json",
                          lambda p=policy, s=seed, st=stage: evaluate(p, f"{st} seed {s}"))
            rows.append(_row(stage, seed, res, evaluate.users, timings[f"{stage}/{seed}"]))
        (work / "timings.json").write_text(json.dumps(timings, indent=1), encoding="utf-8")
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean over seeds per stage: min/mean validity across agents and both rewards."""
    out: dict[str, dict[str, float]] = {}
    for stage in STAGES:
        got = [r for r in rows if r["stage"] == stage]
        if not got:
            continue
        n = len(got)
        out[stage] = {
            "valid_min": sum(min(r["valid_rate"].values()) for r in got) / n,
            "valid_mean": sum(sum(r["valid_rate"].values()) / len(r["valid_rate"]) for r in got) / n,
            "reward_evidence": sum(r["reward_evidence"] for r in got) / n,
            "reward_choice": sum(r["reward_choice"] for r in got) / n,
            "seeds": n,
        }
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = "| stage | seed | " + " | ".join(f"valid {a}" for a in AGENTS) + " | reward evidence | reward choice |"
    lines = [head, "|" + "---|" * (4 + len(AGENTS))]
    for r in rows:
        lines.append(f"| {r['stage']} | {r['seed']} | " + " | ".join(f"{r['valid_rate'][a]:.2f}" for a in AGENTS)
                     + f" | {r['reward_evidence']:.3f} | {r['reward_choice']:.3f} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, model: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = [s for s in STAGES if any(r["stage"] == s for r in rows)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), gridspec_kw={"width_ratios": [1.6, 1, 1]})
    ax = axes[0]
    width = 0.8 / len(AGENTS)
    for j, agent in enumerate(AGENTS):
        means = []
        for stage in stages:
            vals = [r["valid_rate"][agent] for r in rows if r["stage"] == stage]
            means.append(sum(vals) / len(vals))
        ax.bar([x + (j - 1.5) * width for x in range(len(stages))], means, width, label=agent)
    ax.axhline(0.9, color="grey", ls="--", lw=0.8)
    ax.set_xticks(range(len(stages)), stages)
    ax.set_ylim(0, 1.05)
    ax.set_title("JSON validity per agent (dashed: the 90% goal)", fontsize=10)
    ax.legend(fontsize=7, ncol=4, loc="upper left")
    for ax, (title, key) in zip(axes[1:], [("session reward, evidence mode", "reward_evidence"),
                                          ("session reward, choice mode", "reward_choice")], strict=True):
        for x, stage in enumerate(stages):
            vals = [r[key] for r in rows if r["stage"] == stage]
            ax.bar(x, sum(vals) / len(vals), color=f"C{x}", alpha=0.6)
            ax.scatter([x] * len(vals), vals, color="black", s=14, zorder=3)
        ax.set_xticks(range(len(stages)), stages)
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=10)
    users = rows[0]["held_out_users"] if rows else []
    seeds = sorted({r["seed"] for r in rows})
    fig.suptitle(f"{model} on {len(users)} held-out users, seeds {seeds}: bars = mean over seeds, dots = seeds",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(a: LadderArgs, rows: list[dict[str, Any]], seconds: float, argv: list[str]) -> dict[str, Path]:
    """ladder.json, ladder.md and ladder.png; ``seconds`` is this invocation's wall time (a resumed
    run reuses cached stages, so the table also gives the compute time summed over stages)."""
    import torch
    import transformers
    import trl

    out = Path(a.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "ladder.json", "md": out / "ladder.md", "png": out / "ladder.png"}
    paths["json"].write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    summary = summarize(rows)
    cmd = "python train/ladder.py " + " ".join(argv)
    base_eval = next((r["eval_seconds"] or 0 for r in rows if r["stage"] == "base"), 0)
    compute = base_eval + sum((r["train_seconds"] or 0) + (r["eval_seconds"] or 0) for r in rows if r["stage"] != "base")
    md = [f"# Training ladder ({a.model_name_or_path}, CPU)", "",
          f"Command: `{cmd}` (what `make ladder` runs). Compute time summed over stages: {compute / 60:.1f} min "
          f"(this invocation: {seconds / 60:.1f} min) on {os.cpu_count()} CPU cores, {platform.platform()}; torch "
          f"{torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}.", "",
          f"Held-out users: {', '.join(rows[0]['held_out_users']) if rows else '-'} "
          f"(world users {a.held_out_users}; training users {a.train_users}).", "",
          table(rows), "", "Mean over seeds:", "",
          "| stage | min agent validity | mean validity | reward evidence | reward choice |", "|---|---|---|---|---|"]
    md += [f"| {s} | {v['valid_min']:.2f} | {v['valid_mean']:.2f} | {v['reward_evidence']:.3f} | "
           f"{v['reward_choice']:.3f} |" for s, v in summary.items()]
    md += ["", "Configuration:", "", "```json", json.dumps(asdict(a), indent=1), "```", ""]
    paths["md"].write_text("\n".join(md), encoding="utf-8")
    plot(rows, paths["png"], a.model_name_or_path)
    return paths


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from trl import TrlParser

    argv = list(sys.argv[1:] if argv is None else argv)
    (a,) = TrlParser((LadderArgs,)).parse_args_and_config(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    t0 = time.perf_counter()
    rows = run(a)
    paths = write_results(a, rows, time.perf_counter() - t0, argv)
    print(table(rows))
    print("\n".join(f"{k}: {p}" for k, p in paths.items()))
    return rows


if __name__ == "__main__":
    main()
