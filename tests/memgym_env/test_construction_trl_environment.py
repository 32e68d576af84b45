"""MemoryGym-v0 through TRL's ``environment_factory``: the tool-call chat template on the tokenizers we
ship or test with, the tool env stepped like ``gym.make``, and a GRPO step of a tiny random model."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from transformers import AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.chat_template_utils import (  # noqa: E402
    is_chat_template_prefix_preserving,
    parse_response,
    supports_tool_calling,
)

from membuilder.llm.registry import resolve_chat_path  # noqa: E402
from membuilder.memory.ops import AGENTS  # noqa: E402
from membuilder.training.tiny import byte_tokenizer, tiny_llama  # noqa: E402
from memgym_env.construction.config import ConstructionConfig  # noqa: E402
from memgym_env.construction.env import MemoryGymEnv  # noqa: E402
from memgym_env.construction.trl_environment import (  # noqa: E402
    MemoryGymToolEnvs,
    tool_dataset,
    with_tool_template,
)

CONFIG = ConstructionConfig.from_yaml("configs/env/construction_cpu.yaml", questions_per_session=3,
                                      world_overrides={"num_users": 2, "num_periods": 1, "rounds_update": 1})
EMPTY = {"core": "", "episodic": '{"operations": []}', "semantic": '{"operations": []}', "procedural": '{"operations": []}'}


@pytest.fixture(scope="module")
def envs() -> MemoryGymToolEnvs:
    return MemoryGymToolEnvs(CONFIG, sessions_per_rollout=2)


@pytest.mark.parametrize("which", ["tiny", "smollm2-135m"])
def test_the_tool_template_renders_and_parses_a_write_memories_call(which):
    tokenizer = byte_tokenizer() if which == "tiny" else AutoTokenizer.from_pretrained(resolve_chat_path(which))
    assert not supports_tool_calling(tokenizer)  # SmolLM2's ChatML template has no tool calls: we add one
    tokenizer = with_tool_template(tokenizer)
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                           tokenize=False)
    args = {"core": '{"operation": "APPEND", "content": "likes tea"}', **{a: EMPTY[a] for a in AGENTS[1:]}}
    reply = ('<tool_call>\n{"name": "write_memories", "arguments": ' + json.dumps(args)
             + "}\n</tool_call><|im_end|>")
    parsed = parse_response(tokenizer, tokenizer(reply)["input_ids"], prefix=tokenizer(prompt)["input_ids"])
    assert parsed["tool_calls"] == [{"type": "function", "function": {"name": "write_memories", "arguments": args}}]


def test_a_rollout_steps_the_env_as_gym_make_does(envs):
    env = envs()
    first = env.reset(episode=1, seed=3)
    local = MemoryGymEnv(CONFIG)
    obs, _ = local.reset(seed=3, options={"episode": 1})
    assert obs["session"] in first
    expert = local.unwrapped.expert_action()
    _, want, *_ = local.step(expert)
    answer = env.write_memories(**expert)
    assert f"reward {want:.3f}" in answer and "Next:" in answer and want > 0
    obs, _, *_ = local.step(EMPTY)
    assert "last session" in env.write_memories(**EMPTY)
    assert env.get_reward() == pytest.approx(want / 2)  # the empty second write earned 0
    with pytest.raises(ValueError, match="all written"):
        env.write_memories(**EMPTY)
    env.reset(episode=0, seed=0)
    assert env.get_reward() == 0.0  # nothing written yet: a policy that calls no tool earns nothing


def test_grpo_trains_a_tiny_model_through_the_environment_factory(envs, tmp_path):
    tokenizer = with_tool_template(byte_tokenizer())
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=24, max_tool_calling_iterations=2, logging_steps=1, report_to="none",
                      use_cpu=True, bf16=False, save_strategy="no")
    trainer = GRPOTrainer(model=tiny_llama(tokenizer), args=args, train_dataset=tool_dataset([0, 1]),
                          processing_class=tokenizer, environment_factory=envs)
    trainer.train()
    assert trainer.state.global_step == 1 and trainer.reward_func_names == ["MemoryGymToolEnv"]
    assert "rewards/MemoryGymToolEnv/mean" in trainer.state.log_history[0]
