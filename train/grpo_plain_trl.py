"""MemoryGym-v0 with an unmodified ``trl.GRPOTrainer``: a dataset and a reward function, nothing else.

    python train/grpo_plain_trl.py                              # SmolLM2-135M, 2 steps on a CPU
    python train/grpo_plain_trl.py --model Qwen/Qwen3-0.6B --agents core --max-steps 200
    python train/grpo_plain_trl.py --scorer-urls http://10.0.0.5:8100,http://10.0.0.6:8100   # remote scoring

Plain GRPO: every completion gets its agent's reward r_a; ADRPO's attribution weights are only
logged (``train/adrpo.py`` trains with them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from membuilder.llm.registry import resolve_chat_path  # noqa: E402
from membuilder.memory.ops import AGENTS  # noqa: E402
from memgym_env.construction.config import ConstructionConfig  # noqa: E402
from memgym_env.construction.trl_reward import MemoryReward, memory_dataset, session_rows  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", help="a short name, a local checkpoint or a hub id")
    p.add_argument("--env-config", default="configs/env/construction_cpu.yaml")
    p.add_argument("--env-overrides", default="{}", help="ConstructionConfig fields over --env-config, as JSON")
    p.add_argument("--users", default="0,1", help="users whose sessions train, comma-separated")
    p.add_argument("--max-sessions-per-user", type=int, default=2)
    p.add_argument("--agents", default=",".join(AGENTS), help="agents to train, e.g. 'core' (the rest write as the expert)")
    p.add_argument("--scorer-urls", default=None, help="score on `memgym serve-env` replicas instead of here (trains on every session they serve)")
    p.add_argument("--num-generations", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=2)
    p.add_argument("--max-prompt-tokens", type=int, default=768)
    p.add_argument("--max-completion-length", type=int, default=64)
    p.add_argument("--output-dir", default="runs/grpo_plain_trl")
    return p.parse_args(argv)


def main(argv=None):
    import torch
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from membuilder.llm.loading import load_causal_lm

    args = parse_args(argv)
    config = ConstructionConfig.from_yaml(args.env_config, **json.loads(args.env_overrides))
    users = [int(u) for u in args.users.split(",")]
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    path = resolve_chat_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if args.scorer_urls:
        from datasets import Dataset

        from memgym_env.serving.remote_scorer import RemoteScorer

        scorer = RemoteScorer(args.scorer_urls, expected_config=config)
        dataset = Dataset.from_list(session_rows(scorer, None, agents, tokenizer, args.max_prompt_tokens))
    else:
        dataset, scorer = memory_dataset(config, users, args.max_sessions_per_user, agents, tokenizer,
                                         args.max_prompt_tokens)
    # TRL also takes the path itself; a model loaded here is checked to hold every weight first.
    trainer = GRPOTrainer(
        model=load_causal_lm(path), reward_funcs=MemoryReward(scorer), train_dataset=dataset, processing_class=tokenizer,
        args=GRPOConfig(output_dir=args.output_dir, num_generations=args.num_generations,
                        per_device_train_batch_size=2 * args.num_generations, max_steps=args.max_steps,
                        max_completion_length=args.max_completion_length, logging_steps=1, save_strategy="no",
                        use_cpu=not torch.cuda.is_available(), bf16=torch.cuda.is_available(),
                        gradient_checkpointing=False, report_to="none"))
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
