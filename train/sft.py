"""SFT on expert trajectories.

    python train/sft.py --config configs/train/sft_smollm2_cpu.yaml
    accelerate launch --config_file configs/accelerate/zero3.yaml train/sft.py --config configs/train/sft_qwen3_4b.yaml

Experts: ``oracle`` (the world oracle's exact outputs for the chosen users; free) or a model
spec for ``membuilder.llm.load_chat_model`` (e.g. ``openai:gpt-4.1@http://host:8000/v1``)
playing the four agents over the same sessions, or over ``conversations`` (Conversation JSON
files); LLM runs append to ``trajectories_jsonl`` and resume from it.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from membuilder.llm import load_chat_model
from membuilder.llm.embedders import load_embedder
from membuilder.memory.bank import MemoryBank
from membuilder.training.prompts import token_counter
from membuilder.training.sft import build_sft_trainer
from membuilder.training.trajectories import (
    SessionText,
    build_trajectory,
    policy_writer,
    sft_rows,
    to_dataset,
    write_jsonl,
)
from memgym_env.conversation import Conversation
from train.common import (  # noqa: E402
    BenchmarkEvalArgs,
    EnvArgs,
    add_benchmark_eval,
    chosen_episodes,
    expert_records,
    load_policy,
    parse_users,
    peft_from,
    train_and_finish,
)


@dataclass
class SFTScriptArgs(EnvArgs, BenchmarkEvalArgs):
    expert: str = field(default="oracle", metadata={"help": "'oracle' or a chat model spec playing the expert."})
    conversations: list[str] = field(default_factory=list, metadata={
        "help": "Conversation JSON files for an LLM expert (instead of world users)."})
    trajectories_jsonl: str | None = field(default=None, metadata={"help": "Per-session expert records (resumable)."})
    dataset_jsonl: str | None = field(default=None, metadata={"help": "Also export the SFT rows as JSONL here."})
    save_policy_to: str | None = field(default=None, metadata={"help": "Write adapter/ and merged/ here at the end."})
    max_prompt_tokens: int | None = field(default=None, metadata={
        "help": "Cut each prompt's memory view to this many tokens, as ADRPO and the held-out evaluation do."})
    keep_empty_rows: float = field(default=1.0, metadata={
        "help": "Share of rows kept whose expert output writes nothing (chosen by a hash of session and agent)."})
    drop_unseen_quotes: bool = field(default=False, metadata={
        "help": "Leave out rows whose expert output edits an entry the cut prompt does not show (it would teach "
                "the policy to invent what it edits)."})
    first_period_sessions: int = field(default=0, metadata={
        "help": "Oracle expert: besides the max_sessions_per_user picked, take each user's first N sessions of its "
                "first period, where the expert ADDs the user's facts to a memory still filling up (0: none)."})
    empty_memory_repeats: int = field(default=1, metadata={
        "help": "Take the rows of each session that starts from an empty memory (a user's first) this many times."})


def sft_records(args: SFTScriptArgs):
    config = args.construction_config()
    if args.expert == "oracle":
        if args.conversations:
            raise SystemExit("the oracle expert only knows world users; give an LLM expert for `conversations`")
        return expert_records(config, parse_users(args.users), args.max_sessions_per_user, args.trajectories_jsonl,
                              pick=args.session_pick, first_period=args.first_period_sessions)
    if args.first_period_sessions:
        raise SystemExit(f"first_period_sessions needs the oracle expert; an LLM expert ({args.expert}) writes the first "
                         "max_sessions_per_user sessions in order")
    if args.session_pick != "first":  # an LLM expert writes its memory session after session, from the first
        raise SystemExit(f"session_pick {args.session_pick!r} needs the oracle expert; an LLM expert ({args.expert}) "
                         "writes the first max_sessions_per_user sessions in order (session_pick: first)")
    if args.conversations:
        convs = [Conversation.load(p) for p in args.conversations]
    else:
        convs = [ep.conversation for ep in chosen_episodes(config, parse_users(args.users))]
    embedder = load_embedder(config.embedder)
    write = policy_writer(load_chat_model(args.expert))
    records = []
    for conv in convs:
        sessions = [SessionText(f"{conv.id}/{s.id}", s.time, s.render()) for s in conv.sessions]
        records += build_trajectory(sessions[:args.max_sessions_per_user] if args.max_sessions_per_user else sessions,
                                    write, MemoryBank(embedder), view_k=config.view_k, jsonl=args.trajectories_jsonl,
                                    source=args.expert)
    return records


def build(argv=None):
    """Parse the config, build the world, the expert's rows and the trainer; train nothing yet."""
    from transformers import set_seed
    from trl import ModelConfig, SFTConfig, TrlParser

    script, sft_args, model_args = TrlParser((SFTScriptArgs, SFTConfig, ModelConfig)).parse_args_and_config(argv)
    set_seed(sft_args.seed)
    model, tokenizer, _ = load_policy(model_args.model_name_or_path, model_args.dtype, frozen_base=model_args.use_peft)
    records = sft_records(script)
    dropped: list[dict] = []
    rows = sft_rows(records, length=token_counter(tokenizer), max_prompt_tokens=script.max_prompt_tokens,
                    keep_empty=script.keep_empty_rows, drop_unseen_quotes=script.drop_unseen_quotes, dropped=dropped,
                    empty_memory_repeats=script.empty_memory_repeats)
    if script.dataset_jsonl:
        write_jsonl(rows, script.dataset_jsonl)
    dataset = to_dataset(rows)
    per_agent = Counter(d["agent"] for d in dropped)
    print(f"SFT rows: {len(dataset)} of {len(records)} sessions x 4 agents (keep_empty_rows {script.keep_empty_rows}, "
          f"empty_memory_repeats {script.empty_memory_repeats}); "
          f"{len(dropped)} left out for editing an entry their prompt does not show "
          f"({', '.join(f'{a} {n}' for a, n in sorted(per_agent.items())) or 'none'})")
    trainer = build_sft_trainer(model, tokenizer, dataset, sft_args, peft_config=peft_from(model_args, model))
    add_benchmark_eval(trainer, script)
    return trainer, script, tokenizer


def main(argv=None):
    trainer, script, tokenizer = build(argv)
    return train_and_finish(trainer, script.save_policy_to, tokenizer)


if __name__ == "__main__":
    main()
