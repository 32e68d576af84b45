"""MemoryGym-v0 with an unmodified ``trl.GRPOTrainer``: a dataset and a reward function, nothing else.

    python train/grpo_plain_trl.py --config configs/train/grpo_plain_trl_cpu.yaml   # SmolLM2-135M's policy, 2 CPU steps
    python train/grpo_plain_trl.py --config configs/train/grpo_plain_trl_cpu.yaml \
        --model_name_or_path Qwen/Qwen3-0.6B --agents core --max_steps 200
    python train/grpo_plain_trl.py --config configs/train/grpo_plain_trl_cpu.yaml \
        --scorer_urls http://10.0.0.5:8100,http://10.0.0.6:8100                      # remote scoring

``max_completion_length: null`` (the shipped config) sets the completion limit to the longest output
the oracle (the world's expert) writes for the trained agents on the run's sessions, its end-of-turn
token included, as ``train/ladder``'s ``max_completion_tokens`` is chosen: a shorter limit cuts the
policy where the expert is not cut, and a cut output earns 0 (at the old 64 tokens every completion
was cut, so reward, its std, the loss and the gradient were all 0). A number sets it outright.

The shipped config starts from the shipped policy (``smollm2-135m-memgym``, SFT then ADRPO on this
world, a LoRA adapter that keeps training): SmolLM2-135M-Instruct itself does not end an output
within the oracle's length, so every reward of a 2-step run would be 0 and GRPO would learn nothing.

The reward is ADRPO's (``membuilder.training.trl_reward.SessionReward``, with the same metric
names). Plain GRPO: every completion gets its agent's reward r_a; ADRPO's attribution weights are
only logged (``train/adrpo.py`` trains with them).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from membuilder.memory.ops import AGENTS  # noqa: E402
from membuilder.training.trl_reward import SessionReward  # noqa: E402
from memgym_env.construction.trl_reward import memory_dataset, scorer_dataset  # noqa: E402
from memgym_env.serving.remote_scorer import RemoteScorer  # noqa: E402
from train.common import (  # noqa: E402
    EnvArgs,
    load_policy,
    parse_users,
    peft_from,
    require_vllm,
    train_and_finish,
)


@dataclass
class PlainGRPOScriptArgs(EnvArgs):
    agents: str = field(default=",".join(AGENTS), metadata={
        "help": "Agents to train, comma-separated, e.g. 'core'; the others write what the expert wrote."})
    scorer_urls: str | None = field(default=None, metadata={
        "help": "Score on `memgym serve-env` replicas at these URLs (comma-separated) instead of here; the run then "
                "trains on every session they serve."})
    max_prompt_tokens: int | None = field(default=None, metadata={
        "help": "Longest prompt; longer ones lose memory-view entries first, never instructions."})


def oracle_completion_limit(scorer, agents: list[str], tokenizer) -> int:
    """Tokens of the oracle's longest output for ``agents`` over the scorer's sessions, plus the end-of-turn
    token the policy must also write (``train.ladder.evaluator.oracle_over_limit`` counts the same way)."""
    longest = 0
    for key in scorer.session_keys():
        expert = scorer.expert_action(key)
        longest = max([longest] + [len(tokenizer(expert[a])["input_ids"]) + 1 for a in agents])
    if longest <= 1:
        raise ValueError("max_completion_length: null derives the limit from the oracle's outputs, but the run's "
                         f"sessions ({len(scorer.session_keys())}) hold none for agents {agents}; set a number")
    return longest


def build(argv=None):
    """Parse the config, build the world, the scorer and the trainer; train nothing yet."""
    from transformers import set_seed
    from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser

    script, args, model_args = TrlParser((PlainGRPOScriptArgs, GRPOConfig, ModelConfig)).parse_args_and_config(argv)
    require_vllm(args.use_vllm, args.vllm_mode)
    set_seed(args.seed)
    model, tokenizer, _ = load_policy(model_args.model_name_or_path, model_args.dtype, frozen_base=model_args.use_peft)
    config = script.construction_config()
    agents = [a.strip() for a in script.agents.split(",") if a.strip()]
    if script.scorer_urls:
        scorer = RemoteScorer(script.scorer_urls, expected_config=config)
        dataset = scorer_dataset(scorer, agents, tokenizer, script.max_prompt_tokens)
    else:
        dataset, scorer = memory_dataset(config, parse_users(script.users), script.max_sessions_per_user, agents,
                                         tokenizer, script.max_prompt_tokens, pick=script.session_pick)
    if args.max_completion_length is None:
        args.max_completion_length = oracle_completion_limit(scorer, agents, tokenizer)
        print(f"max_completion_length: {args.max_completion_length} tokens, the oracle's longest output")
    print(f"plain GRPO rows: {len(dataset)} (sessions x agents {agents}), G={args.num_generations}")
    trainer = GRPOTrainer(model=model, reward_funcs=SessionReward(scorer, seed=args.seed), args=args,
                          train_dataset=dataset, processing_class=tokenizer, peft_config=peft_from(model_args, model))
    return trainer, script, tokenizer


def main(argv=None):
    trainer, _, tokenizer = build(argv)
    return train_and_finish(trainer, None, tokenizer)


if __name__ == "__main__":
    main()
