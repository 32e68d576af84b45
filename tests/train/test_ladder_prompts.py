"""The ladder's prompts, cut to its budget, still show what the oracle's writing edits.

At a 384-token budget with the old cut order no Semantic or Procedural writer saw one of its own entries after
period 0 (the Core context went last), so SFT learnt to invent the entry an UPDATE names and the reward of
every later period was out of reach; this pins the setting that fixed it (``fit_prompt``, view_k, budget).
"""

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer  # noqa: E402

from membuilder.agents.constructor import fit_prompt  # noqa: E402
from membuilder.llm.registry import resolve_chat_path  # noqa: E402
from membuilder.memory.ops import AGENTS  # noqa: E402
from membuilder.training.prompts import token_counter  # noqa: E402
from train.ladder.evaluator import Evaluator  # noqa: E402
from train.ladder.settings import parse_args  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _targets(agent: str, text: str) -> list[str]:
    """The existing text an expert output edits: Core's REPLACE old_text, the others' UPDATE old_memory."""
    out = json.loads(text)
    if agent == "core":
        return [out["old_text"]] if out.get("operation") == "REPLACE" else []
    return [op["old_memory"] for op in out.get("operations", []) if op.get("action") == "UPDATE"]


def test_the_ladders_prompts_show_the_entries_the_oracle_edits(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    # the first 6 sessions of each user: the sample the README's in-view counts were measured on
    a = parse_args(["--config", "configs/train/ladder_smollm2_cpu.yaml", "--held_out_users", "8-10",
                    "--eval_sessions_per_user", "6"])
    scorer = Evaluator(a, tmp_path).scorers["evidence"]
    length = token_counter(AutoTokenizer.from_pretrained(resolve_chat_path(a.model_name_or_path)))
    seen = {agent: [0, 0] for agent in AGENTS}
    for key in scorer.session_keys():
        obs, expert = scorer.observation(key), scorer.expert_action(key)
        for agent in AGENTS:
            prompt = fit_prompt(agent, obs, length, a.max_prompt_tokens)
            assert length(prompt) <= a.max_prompt_tokens
            for target in _targets(agent, expert[agent]):
                seen[agent][1] += 1
                seen[agent][0] += target in prompt[-1]["content"]
    assert seen["core"][1] >= 10 and seen["semantic"][1] >= 10  # changes after period 0 are in the sample
    assert seen["core"][0] == seen["core"][1] and seen["procedural"][0] == seen["procedural"][1]
    # a few Semantic targets are not among the 8 entries MiniLM ranks closest to the session
    assert seen["semantic"][0] >= 0.8 * seen["semantic"][1], seen
