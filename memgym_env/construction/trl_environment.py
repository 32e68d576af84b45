"""MemoryGym-v0 for TRL's multi-turn training (``GRPOTrainer(environment_factory=...)``, TRL >= 1.0):
the policy writes a session's memories by calling a tool, and the tool answers with the next session.

    from trl import GRPOConfig, GRPOTrainer
    from memgym_env.construction.trl_environment import MemoryGymToolEnvs, tool_dataset, with_tool_template

    envs = MemoryGymToolEnvs(ConstructionConfig(answer_mode="evidence"), sessions_per_rollout=2)
    trainer = GRPOTrainer(model=model, args=GRPOConfig(...), train_dataset=tool_dataset(users=[0, 1]),
                          processing_class=with_tool_template(tokenizer), environment_factory=envs)

A rollout is the start of one user's episode: ``reset`` puts the first session (and the memory view)
after the row's instructions, and each ``write_memories`` call is ``env.step`` with the four agents'
outputs; it answers with the next session, until ``sessions_per_rollout`` sessions are written. The
reward (``get_reward``, which TRL adds as a reward of its own) is the mean step reward over those
sessions, a session never written counting 0: a policy that calls no tool earns nothing.

TRL needs a chat template that renders tool calls, and a response template to parse them.
SmolLM2's ChatML template (and the byte tokenizer of the tests' tiny models) has neither:
``with_tool_template`` gives such a tokenizer ``TOOL_CHAT_TEMPLATE``, ChatML with tools in
Qwen2.5's format (``<tool_call>{"name": ..., "arguments": ...}</tool_call>``), and
``RESPONSE_TEMPLATE``, its parser; a template that already supports tool calls is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from membuilder.memory import MEMORY_TYPES
from membuilder.memory.ops import AGENTS
from memgym_env.construction.config import ConstructionConfig
from memgym_env.construction.env import MemoryGymEnv

SYSTEM = "You are a careful memory-writing agent. You write memories only by calling the write_memories tool."
INSTRUCTIONS = (
    "You keep an assistant's long-term memory of its conversations with one user. Each session below is one "
    "conversation; write what is worth remembering from it by calling write_memories once per session, with "
    "four JSON outputs:\n"
    '- core: {"operation": "APPEND"|"REPLACE"|"REWRITE", ...}, the short profile of the user;\n'
    '- episodic, semantic, procedural: {"operations": [{"action": "ADD"|"UPDATE"|"DELETE"|..., ...}]}, events, '
    "facts and how-tos; '{\"operations\": []}' writes nothing.\n"
    "The tool answers with the next session.")

# ChatML with tools, in Qwen2.5's format, prefix-preserving (an earlier message renders the same
# whatever follows), which TRL's multi-turn loop needs. SmolLM2's default system line where none is given.
TOOL_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
    "{%- else %}{%- set system = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' %}{%- endif %}"
    "{{- '<|im_start|>system\\n' + system }}"
    "{%- if tools %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}"
    "\\n</tool_call>' }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- elif not message.tool_calls %}{{- '\\n' }}{%- endif %}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}"
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# transformers' response template (>= 5.13) for TOOL_CHAT_TEMPLATE: text, then any <tool_call> blocks.
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True, "content": "json",
                       "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def with_tool_template(tokenizer):
    """``tokenizer``, given ``TOOL_CHAT_TEMPLATE`` and ``RESPONSE_TEMPLATE`` unless its template already renders
    tool calls (TRL's ``supports_tool_calling``); a ChatML tokenizer (``<|im_start|>``, ``<|im_end|>``) is needed."""
    from trl.chat_template_utils import supports_tool_calling

    if supports_tool_calling(tokenizer):
        return tokenizer
    unknown = (None, tokenizer.unk_token_id)
    missing = [t for t in ("<|im_start|>", "<|im_end|>") if tokenizer.convert_tokens_to_ids(t) in unknown]
    if missing:
        raise ValueError(f"the tokenizer's chat template cannot render tool calls, and MemoryGym's ChatML tool "
                         f"template needs the special tokens {missing}, which this tokenizer lacks: give it a chat "
                         "template with tool calls")
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def tool_dataset(users: Sequence[int], seed: int = 0):
    """``datasets.Dataset``, one row per user: the instructions, and the episode (and seed) ``reset`` gets."""
    from datasets import Dataset

    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": INSTRUCTIONS}]
    return Dataset.from_list([{"prompt": prompt, "episode": int(u), "seed": seed + i} for i, u in enumerate(users)])


class MemoryGymToolEnvs:
    """TRL's ``environment_factory``: each call makes a ``MemoryGymToolEnv``; all share one load of the
    world, the embedder and the answer models."""

    def __init__(self, config: ConstructionConfig, sessions_per_rollout: int = 2):
        if not isinstance(sessions_per_rollout, int) or sessions_per_rollout < 1:
            raise ValueError(f"sessions_per_rollout must be a whole number >= 1, got {sessions_per_rollout!r}")
        self.config, self.sessions_per_rollout = config, sessions_per_rollout
        self._first: MemoryGymEnv | None = None

    def __call__(self) -> MemoryGymToolEnv:
        env = MemoryGymEnv(self.config)
        if self._first is None:
            env.load_models()
            self._first = env
        else:
            env.share_models_with(self._first)
        return MemoryGymToolEnv(env, self.sessions_per_rollout)


class MemoryGymToolEnv:
    """One rollout's environment: ``reset``, the ``write_memories`` tool, and ``get_reward``."""

    def __init__(self, env: MemoryGymEnv, sessions_per_rollout: int):
        self._env, self._limit = env, sessions_per_rollout
        self._rewards: list[float] = []
        self._planned = 0
        self._done = True

    def reset(self, episode: int | None = None, seed: int | None = None, **_: Any) -> str:
        obs, info = self._env.reset(seed=seed, options=None if episode is None else {"episode": int(episode)})
        self._rewards, self._done = [], False
        self._planned = min(self._limit, int(info["num_sessions"]))
        return "\n\n" + _render(obs)

    def write_memories(self, core: str, episodic: str, semantic: str, procedural: str) -> str:
        """Write this session's memories; answers with the next session.

        Args:
            core: The Core agent's JSON output, e.g. {"operation": "APPEND", "content": "..."}.
            episodic: The Episodic agent's JSON output, {"operations": [...]}.
            semantic: The Semantic agent's JSON output, {"operations": [...]}.
            procedural: The Procedural agent's JSON output, {"operations": [...]}.
        """
        if self._done:
            raise ValueError("this rollout's sessions are all written; stop calling write_memories")
        action = dict(zip(AGENTS, (core, episodic, semantic, procedural)))
        obs, reward, terminated, truncated, _ = self._env.step({a: str(v) for a, v in action.items()})
        self._rewards.append(float(reward))
        if terminated or truncated or len(self._rewards) >= self._planned:
            self._done = True
            return f"Session written (reward {reward:.3f}). That was the last session: stop."
        return f"Session written (reward {reward:.3f}). Next:\n\n" + _render(obs)

    def get_reward(self) -> float:
        """Mean step reward over the rollout's sessions; one never written counts 0."""
        return sum(self._rewards) / self._planned if self._planned else 0.0


def _render(obs: dict[str, Any]) -> str:
    views = "\n".join(f"{t.capitalize()} entries:\n" + ("\n".join(f"{i}. {e}" for i, e in enumerate(obs[t], 1))
                                                         or "(none yet)") for t in MEMORY_TYPES)
    return (f"Session {int(obs['session_index']) + 1} of {int(obs['num_sessions'])} "
            f"({obs['session_time'] or 'an unknown date'}):\n{obs['session']}\n\n"
            f"Core memory ({float(obs['core_usage']):.0f}% full):\n{obs['core'] or '(empty)'}\n\n{views}")
