"""ADRPO (or plain GRPO with alpha 1) on MemoryGym-v0 sessions.

    python train/adrpo.py --config configs/train/adrpo_smollm2_cpu.yaml
    accelerate launch --config_file configs/accelerate/single_gpu.yaml train/adrpo.py \
        --config configs/train/adrpo_qwen3_4b_colocate.yaml
    # rollouts from a separate vLLM server (GPUs 0-1), training on GPUs 2-7:
    CUDA_VISIBLE_DEVICES=0,1 trl vllm-serve --model Qwen/Qwen3-4B --tensor-parallel-size 2
    CUDA_VISIBLE_DEVICES=2,3,4,5,6,7 accelerate launch --config_file configs/accelerate/zero3.yaml \
        --num_processes 6 train/adrpo.py --config configs/train/adrpo_qwen3_4b_server.yaml

Rewards come from a scorer: ``env`` is MemoryGym-v0's session scorer (QA reward, length
penalty, attribution weights); ``remote`` is the same scorer on ``memgym serve-env`` replicas
(``scorer_urls``), for scoring on other machines; ``format`` scores only JSON validity and length
(no attribution).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from membuilder.training.adrpo import ADRPOConfig, ADRPOTrainer
from membuilder.training.format_scorer import FormatScorer
from membuilder.training.prompts import rl_rows, token_counter
from memgym_env.construction.scoring import SessionScorer, pick_sessions
from memgym_env.serving.remote_scorer import RemoteScorer
from train.common import (  # noqa: E402
    BenchmarkEvalArgs,
    EnvArgs,
    add_benchmark_eval,
    chosen_episodes,
    expert_records,
    full_checkpoint,
    load_policy,
    parse_users,
    peft_from,
    require_vllm,
    session_periods,
    train_and_finish,
)


@dataclass
class ADRPOScriptArgs(EnvArgs, BenchmarkEvalArgs):
    scorer: str = field(default="env", metadata={
        "help": "'env' (MemoryGym-v0 session reward, scored here), 'remote' (the same reward from `memgym serve-env` "
                "replicas at scorer_urls) or 'format'."})
    scorer_urls: str | None = field(default=None, metadata={
        "help": "scorer: remote: replica URLs, comma-separated (used round-robin), or one load-balanced URL."})
    scorer_timeout_s: float = field(default=300.0, metadata={"help": "scorer: remote: seconds one scoring call may take."})
    scorer_retries: int = field(default=2, metadata={
        "help": "scorer: remote: a failed call is sent again to the next replica at most this many times."})
    eval_users: str | None = field(default=None, metadata={
        "help": "Users whose sessions are evaluated every eval_steps (same reward, no training), e.g. '18-19'."})
    save_policy_to: str | None = field(default=None, metadata={"help": "Write adapter/ and merged/ here at the end."})


def make_scorer(script: ADRPOScriptArgs, users: list[int]):
    """The reward of this run: the env config's scorer over the chosen users' sessions."""
    config = script.construction_config()
    if script.scorer == "format":
        records = expert_records(config, users, script.max_sessions_per_user, pick=script.session_pick)
        return FormatScorer({r["key"]: r["observation"] for r in records}, lam=config.lam,
                            experts={r["key"]: r["outputs"] for r in records})
    if script.scorer == "remote":
        if not script.scorer_urls:
            raise SystemExit("scorer: remote needs scorer_urls, e.g. http://10.0.0.5:8100,http://10.0.0.6:8100 "
                             "(replicas started with `memgym serve-env` on this run's env config)")
        # The replicas must score this run's world with this run's settings: checked field by field.
        return RemoteScorer(script.scorer_urls, timeout_s=script.scorer_timeout_s, retries=script.scorer_retries,
                            expected_config=config)
    if script.scorer != "env":
        raise SystemExit(f"scorer must be 'env', 'remote' or 'format', not {script.scorer!r}")
    return SessionScorer(config, users, script.max_sessions_per_user, pick=script.session_pick)


def user_keys(script: ADRPOScriptArgs, scorer, users: list[int]) -> list[str]:
    """The scorer's session keys that belong to ``users`` and to the sessions this run picks of them
    (``max_sessions_per_user``, ``session_pick``; keys are ``<conversation>/<session>``): a remote scorer
    may serve more sessions of a user than this run asks for."""
    wanted = set()
    for ep in chosen_episodes(script.construction_config(), users):
        sessions = ep.conversation.sessions
        wanted |= {f"{ep.conversation.id}/{sessions[j].id}"
                   for j in pick_sessions(session_periods(ep), script.max_sessions_per_user, script.session_pick)}
    return [k for k in scorer.session_keys() if k in wanted]


def build(argv=None):
    """Parse the config, build the world, the scorer and the trainer; train nothing yet."""
    from datasets import Dataset
    from transformers import set_seed
    from trl import ModelConfig, TrlParser

    script, args, model_args = TrlParser((ADRPOScriptArgs, ADRPOConfig, ModelConfig)).parse_args_and_config(argv)
    require_vllm(args.use_vllm, args.vllm_mode)
    set_seed(args.seed)
    model, tokenizer, path = load_policy(model_args.model_name_or_path, model_args.dtype, frozen_base=model_args.use_peft)
    # vLLM colocate builds its engine from this path; from an adapter it starts on the base, and the merged
    # policy's weights are synced in before the first rollout (TRL syncs whenever the step changes)
    model.name_or_path = full_checkpoint(path)
    train_users = parse_users(script.users)
    eval_users = parse_users(script.eval_users) if script.eval_users else []
    if set(train_users) & set(eval_users):
        raise SystemExit(f"eval_users {script.eval_users!r} overlap the training users {script.users!r}")
    scorer = make_scorer(script, train_users + eval_users)  # one scorer, one set of models, for both
    count = token_counter(tokenizer)

    def rows_of(users):
        return Dataset.from_list(rl_rows(user_keys(script, scorer, users), scorer.observation, count,
                                         args.max_prompt_tokens))

    train_rows = rows_of(train_users)
    eval_rows = rows_of(eval_users) if eval_users else None
    print(f"ADRPO rows: {len(train_rows)} ({len(train_rows) // 4} sessions x 4 agents), "
          f"alpha={script.construction_config().alpha}, G={args.num_generations}")
    trainer = ADRPOTrainer(model=model, args=args, scorer=scorer, train_dataset=train_rows, eval_dataset=eval_rows,
                           processing_class=tokenizer, peft_config=peft_from(model_args, model))
    add_benchmark_eval(trainer, script)
    return trainer, script, tokenizer


def main(argv=None):
    trainer, script, tokenizer = build(argv)
    return train_and_finish(trainer, script.save_policy_to, tokenizer)


if __name__ == "__main__":
    main()
