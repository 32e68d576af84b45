"""``memgym rollout``: play MemoryGym-v0 episodes with a baseline policy and report its rewards."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from membuilder.agents.constructor import MemBuilderPolicy
from membuilder.llm import load_chat_model
from membuilder.llm.registry import TRAINED_POLICY, constructor_spec
from membuilder.memory.ops import AGENTS
from membuilder.plumbing.json_files import atomic_write_text
from memgym_env.construction.env import ConstructionConfig, MemoryGymEnv

HELP = "Run MemoryGym-v0 episodes with the oracle, empty or MemBuilder-prompting policy."
EXAMPLES = """examples:
  memgym rollout --policy oracle --answer-mode evidence --out runs/oracle.json
  memgym rollout --policy membuilder --world world.json --episodes 1 --max-sessions 3   # the trained SmolLM2 policy
  memgym rollout --policy membuilder --policy-model smollm2-135m --max-sessions 3        # the untrained base
  memgym rollout --policy membuilder --model openai:Qwen/Qwen3-4B@http://localhost:8000/v1 --answer-mode llm
"""

POLICIES = ("oracle", "empty", "membuilder")
EMPTY = {"core": "", "episodic": '{"operations": []}', "semantic": '{"operations": []}', "procedural": '{"operations": []}'}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", choices=POLICIES, default="oracle")
    p.add_argument("--model", default="smollm2-135m",
                   help="model spec of the membuilder policy (default smollm2-135m: SmolLM2, written by --policy-model)")
    p.add_argument("--policy-model", default=TRAINED_POLICY,
                   help=f"the memory constructor where --model is SmolLM2-135M: {TRAINED_POLICY} (default, the "
                        "trained policy shipped in the package) or smollm2-135m (the untrained base); any other "
                        "--model writes memory itself")
    p.add_argument("--world", help="a world data.json (default: generate a small one)")
    p.add_argument("--config", help="a MemoryGym-v0 YAML config (configs/env/construction.yaml)")
    p.add_argument("--answer-mode", choices=("choice", "llm", "evidence"), help="override the config's answer mode")
    p.add_argument("--snapshot", choices=("expert", "on_policy"), help="override the config's snapshot mode")
    p.add_argument("--episodes", type=int, default=1)
    p.add_argument("--max-sessions", type=int, help="stop each episode after this many sessions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/rollout.json"))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    overrides = {k: v for k, v in {"world_path": args.world, "answer_mode": args.answer_mode,
                                   "snapshot": args.snapshot}.items() if v}
    cfg = ConstructionConfig.from_yaml(args.config, **overrides) if args.config else ConstructionConfig(**overrides)
    env = MemoryGymEnv(cfg)
    policy, constructor = None, None
    if args.policy == "membuilder":
        constructor = constructor_spec(args.model, args.policy_model)
        policy = MemBuilderPolicy(load_chat_model(constructor))

    steps = []
    n_eps = min(args.episodes, len(env.episodes))
    for ep in range(n_eps):
        obs, info = env.reset(seed=args.seed + ep, options={"episode": ep})
        total = info["num_sessions"] if args.max_sessions is None else min(args.max_sessions, info["num_sessions"])
        for _ in tqdm(range(total), desc=f"episode {ep} ({args.policy})"):
            action = env.expert_action() if args.policy == "oracle" else EMPTY if policy is None else policy.act(obs)
            obs, reward, done, _, info = env.step(action)
            steps.append({"episode": ep, "session": info["session_index"], "reward": reward,
                          "agent_rewards": info["agent_rewards"], "valid": info["valid"],
                          "task_reward": info["task_reward"], "length_penalty": info["length_penalty"],
                          "weights": info["weights"], "questions": info["questions"]})
            if done:
                break

    def mean(xs):
        xs = list(xs)
        return sum(xs) / len(xs) if xs else 0.0

    summary = {
        "policy": args.policy, "model": constructor, "config": cfg.__dict__,
        "sessions": len(steps), "mean_reward": mean(s["reward"] for s in steps),
        "mean_task_reward": mean(s["task_reward"] for s in steps),
        "per_agent": {a: {"reward": mean(s["agent_rewards"][a] for s in steps),
                          "valid": mean(float(s["valid"][a]) for s in steps),
                          "length_penalty": mean(s["length_penalty"][a] for s in steps)} for a in AGENTS},
    }
    atomic_write_text(args.out, json.dumps({"summary": summary, "steps": steps}, indent=1, default=str))

    table = Table(title=f"MemoryGym-v0 rollout: {args.policy} ({len(steps)} sessions, mean reward {summary['mean_reward']:.3f}, "
                        f"task {summary['mean_task_reward']:.3f})")
    for col in ("agent", "reward", "valid", "length penalty"):
        table.add_column(col)
    for a, row in summary["per_agent"].items():
        table.add_row(a, f"{row['reward']:.3f}", f"{row['valid']:.2f}", f"{row['length_penalty']:.3f}")
    Console().print(table)
    print(f"wrote {args.out}")
    return 0
