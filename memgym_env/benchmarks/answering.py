"""The answer prompt of the evaluation runner (protocols §1; our wording).

The answerer sees the memory (Core block, then the numbered retrieved entries; or, for the
baselines, raw chunks or the whole history), then the current date (the question's date, else
the last session's), then the question. It is told to prefer the most recent memory on
conflicts and to say the fact is not answerable when memory lacks it. The refusal sentence
contains "not mentioned", one of the two phrases of LoCoMo's published category-5 F1 rule, so
a correct refusal scores there as it would under that rule's own harness.
"""

from __future__ import annotations

from memgym_env.conversation import Conversation, QAItem

REFUSAL = "Not answerable: not mentioned in memory."

_SYSTEM = ("You are an assistant with long-term memory of your past conversations with the user. "
           "Answer questions using only what your memory holds.")

_USER = """{memory}

Current date: {date}

Question: {question}

Answer in a short phrase, using only the memory above. If pieces of memory disagree, trust the most
recent one. If the memory does not hold the fact, answer exactly: {refusal}"""


def current_date(conv: Conversation, item: QAItem) -> str:
    if item.question_date:
        return item.question_date
    for s in reversed(conv.sessions):
        if s.time:
            return s.time
    return "unknown"


def memory_block(core: str | None, retrieved: list[str], heading: str = "Retrieved memories (most relevant first)") -> str:
    """Core block, then the numbered retrieved texts."""
    parts = []
    if core is not None:
        parts.append("Core memory:\n" + (core.strip() or "(empty)"))
    numbered = "\n".join(f"{i}. {t}" for i, t in enumerate(retrieved, 1)) or "(none)"
    parts.append(f"{heading}:\n{numbered}")
    return "\n\n".join(parts)


def answer_prompt(memory: str, conv: Conversation, item: QAItem) -> list[dict[str, str]]:
    user = _USER.format(memory=memory, date=current_date(conv, item), question=item.question, refusal=REFUSAL)
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]
