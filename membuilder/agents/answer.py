"""Answering questions from memory: Core + numbered top-10 entries + the current date.

Two modes: free-form (``answer_prompt`` -> generate) and multiple choice (``choose``), which
scores each numbered option by the model's summed log-probability: exact and cheap on a CPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from membuilder import prompts
from membuilder.agents.choice import best_option, score_options
from membuilder.llm.base import ChatMessages, ChatModel, Sampling
from membuilder.memory.entry import Hit

SYSTEM = "You are a helpful personal assistant with a long-term memory of the user."
NOT_ANSWERABLE = "Not answerable"


def memory_lines(hits: Sequence[Hit]) -> str:
    return "\n".join(f"{i}. {h.entry.text}" for i, h in enumerate(hits, 1)) or "(none)"


def answer_prompt(core: str, hits: Sequence[Hit], current_date: str | None, question: str) -> ChatMessages:
    user = prompts.render("answer", core=core or "(empty)", memories=memory_lines(hits),
                          current_date=current_date or "unknown", question=question)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def choice_prompt(core: str, hits: Sequence[Hit], current_date: str | None, question: str,
                  choices: Sequence[str]) -> ChatMessages:
    options = "\n".join(f"{i}. {c}" for i, c in enumerate(choices, 1))
    user = prompts.render("answer_choice", core=core or "(empty)", memories=memory_lines(hits),
                          current_date=current_date or "unknown", question=question, choices=options)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def choose(model: ChatModel, prompt: ChatMessages, n_choices: int) -> int:
    """Index of the option the model finds most likely (its number, scored as the reply)."""
    scores = model.choice_logprobs(prompt, [str(i) for i in range(1, n_choices + 1)])
    return max(range(n_choices), key=lambda i: (scores[i], -i))


def choose_many(model: ChatModel, items: Sequence[tuple[ChatMessages, int]]) -> list[int]:
    """``choose`` for many (prompt, number of options) pairs, batched when the backend can."""
    scores = score_options(model, [p for p, _ in items], [[str(i) for i in range(1, n + 1)] for _, n in items])
    return [best_option(s) for s in scores]


def answer_many(model: ChatModel, prompts_: Sequence[ChatMessages], max_new_tokens: int = 48) -> list[str]:
    """Free-form answers, one batched call."""
    outs = model.generate(list(prompts_), Sampling(temperature=0.0, max_new_tokens=max_new_tokens))
    return [o.text.strip() for o in outs]


_NUMBER = re.compile(r"\d+")


def parse_choice(text: str, n_choices: int) -> int | None:
    """The option index named in a reply (``{"answer": 2}`` or a bare ``2``); None if none is."""
    m = _NUMBER.search(text or "")
    if not m:
        return None
    k = int(m.group())
    return k - 1 if 1 <= k <= n_choices else None
