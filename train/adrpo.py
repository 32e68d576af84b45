"""ADRPO (or plain GRPO with alpha 1) on MemoryGym-v0 sessions.

    python train/adrpo.py --config configs/train/adrpo_smollm2_cpu.yaml
    accelerate launch --config_file configs/accelerate/single_gpu.yaml train/adrpo.py \
        --config configs/train/adrpo_qwen3_4b_colocate.yaml
    # rollouts from a separate vLLM server (GPUs 0-1), training on GPUs 2-7:
    CUDA_VISIBLE_DEVICES=0,1 trl vllm-serve --model Qwen/Qwen3-4B --tensor-parallel-size 2
    CUDA_VISIBLE_DEVICES=2,3,4,5,6,7 accelerate launch --config_file configs/accelerate/zero3.yaml \
        --num_processes 6 train/adrpo.py --config configs/train/adrpo_qwen3_4b_server.yaml

Rewards come from a scorer: ``env`` is MemoryGym-v0's session scorer (QA reward, length
penalty, attribution weights); ``format`` scores only JSON validity and length (no attribution).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train.common import (  # noqa: E402
    WorldArgs,
    load_policy,
    load_world,
    parse_users,
    peft_from,
    require_vllm,
    world_expert_records,
)


@dataclass
class ADRPOScriptArgs(WorldArgs):
    scorer: str = field(default="env", metadata={"help": "'env' (MemoryGym-v0 session reward) or 'format'."})
    snapshot: str = field(default="expert", metadata={"help": "Memory before each session: 'expert' or 'policy'."})
    answer_mode: str = field(default="evidence", metadata={"help": "How the env answers session QA: 'evidence' or "
                                                                   "'choice'."})
    answer_model: str | None = field(default=None, metadata={"help": "Chat model spec answering the session QA "
                                                                     "(default: the env's)."})
    judge_model: str | None = field(default=None, metadata={"help": "Chat model spec judging answers (default: the "
                                                                    "env's)."})
    embedder: str = field(default="minilm", metadata={"help": "Embedder of the memory banks."})
    view_k: int = field(default=20, metadata={"help": "Own-type entries each agent sees."})
    save_policy_to: str | None = field(default=None, metadata={"help": "Write adapter/ and merged/ here at the end."})


def make_scorer(script: ADRPOScriptArgs, reward_lambda: float | None):
    if script.scorer == "format":
        from membuilder.llm.embedders import load_embedder
        from membuilder.training.format_scorer import FormatScorer

        records = world_expert_records(load_world(script), parse_users(script.users), load_embedder(script.embedder),
                                       script.view_k, script.max_sessions_per_user)
        return FormatScorer({r["key"]: r["observation"] for r in records}, reward_lambda=reward_lambda or 0.0)
    if script.scorer != "env":
        raise SystemExit(f"scorer must be 'env' or 'format', not {script.scorer!r}")
    try:
        from memgym_env.construction import make_scorer as env_scorer
    except ImportError as exc:
        raise SystemExit(f"scorer 'env' needs memgym_env.construction.make_scorer ({exc}); use scorer: format") from exc
    options = dict(world_config=script.world_config, world_path=script.world_path, world_seed=script.world_seed,
                   num_users=script.num_users, users=parse_users(script.users),
                   max_sessions_per_user=script.max_sessions_per_user, snapshot=script.snapshot,
                   answer_mode=script.answer_mode, answer_model=script.answer_model, judge_model=script.judge_model,
                   embedder=script.embedder, view_k=script.view_k, reward_lambda=reward_lambda)
    return env_scorer({k: v for k, v in options.items() if v is not None})


def main(argv=None):
    from datasets import Dataset
    from transformers import set_seed
    from trl import ModelConfig, TrlParser

    from membuilder.training.adrpo import ADRPOConfig, ADRPOTrainer
    from membuilder.training.checkpoints import save_policy
    from membuilder.training.prompts import rl_rows, token_counter

    script, args, model_args = TrlParser((ADRPOScriptArgs, ADRPOConfig, ModelConfig)).parse_args_and_config(argv)
    require_vllm(args.use_vllm)
    set_seed(args.seed)
    model, tokenizer, path = load_policy(model_args.model_name_or_path, model_args.dtype)
    model.name_or_path = path  # vLLM colocate builds its engine from this path
    scorer = make_scorer(script, args.reward_lambda)
    rows = rl_rows(scorer.session_keys(), scorer.observation, token_counter(tokenizer), args.max_prompt_tokens)
    print(f"ADRPO rows: {len(rows)} ({len(rows) // 4} sessions x 4 agents), alpha={args.alpha}, G={args.num_generations}")
    trainer = ADRPOTrainer(model=model, args=args, scorer=scorer, train_dataset=Dataset.from_list(rows),
                           processing_class=tokenizer, peft_config=peft_from(model_args))
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    if script.save_policy_to and trainer.accelerator.is_main_process:
        print(save_policy(trainer.model, tokenizer, script.save_policy_to))
    return trainer


if __name__ == "__main__":
    main()
