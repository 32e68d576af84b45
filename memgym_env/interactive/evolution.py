"""Self-evolution of an assistant's memory policy (AMemGym, protocols §4).

After each period, a model rewrites the "what to remember" section (``assistant.guide``) of an
assistant's memory-update prompt from feedback on that period's questions:

* ``question-only``: the questions asked;
* ``complete``: each question, its numbered choices, the answer given, the right answer, the
  memories the assistant retrieved for it (what it was shown when answering: its ``context`` for
  the question, cut to the last ``MAX_MEMORY_CHARS`` characters, where the best hits sit), and
  the period's state updates (AMemGym's published feedback, protocols §6).

The answer given is labelled with the number and text of the option the assistant chose (the
published code shows the neighbouring option: an off-by-one between 0-based choices and 1-based
numbers). Compare runs with ``--evolve none`` and with a mode (``memgym report``): memory score
and factual recall per period are the cycles of the loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from membuilder import prompts
from membuilder.agents.assistant import bound
from membuilder.llm.base import Sampling

MODES = ("none", "question-only", "complete")
MAX_GUIDE_CHARS = 1200  # a rambling rewrite must not swamp the memory prompt
MAX_MEMORY_CHARS = 600  # retrieved memories shown per question in complete feedback


def can_evolve(assistant: Any) -> bool:
    return isinstance(getattr(assistant, "guide", None), str)


def feedback_text(mode: str, questions: Sequence[Mapping[str, Any]], updates: Mapping[str, tuple[str | None, str]]) -> str:
    """``questions``: {question, choices, choice (0-based, given), correct_index, memories (the
    text retrieved for it; optional)}; ``updates``: readable variable title -> (old text or None,
    new text)."""
    if mode not in MODES[1:]:
        raise ValueError(f"evolution mode {mode!r}: expected one of {MODES[1:]}")
    lines = []
    for i, q in enumerate(questions, 1):
        lines.append(f"Question {i}: {q['question']}")
        if mode == "complete":
            lines += [f"  {k}. {c}" for k, c in enumerate(q["choices"], 1)]
            given, right = q["choice"], q["correct_index"]
            lines.append(f"  Answer given: {given + 1}. {q['choices'][given]}")
            lines.append(f"  Right answer: {right + 1}. {q['choices'][right]}")
            if "memories" in q:
                shown = str(q["memories"]).strip()
                shown = ("..." + shown[-MAX_MEMORY_CHARS:]) if len(shown) > MAX_MEMORY_CHARS else shown
                lines.append("  Memories retrieved for it:")
                lines += [f"    {line}" for line in (shown or "(none)").splitlines()]
    if mode == "complete" and updates:
        lines.append("What changed in the user's life this period:")
        lines += [f"- {title}: {new}" + (f" (before: {old})" if old else "") for title, (old, new) in updates.items()]
    return "\n".join(lines)


def rewrite_guide(model, guide: str, feedback: str, max_new_tokens: int = 120) -> str:
    """The model's new guide; its old one when the reply is empty."""
    prompt = prompts.render("evolve_guide", guide=guide, feedback=feedback)
    out = bound(model, "evolve").generate([[{"role": "user", "content": prompt}]],
                                          Sampling(temperature=0.0, max_new_tokens=max_new_tokens))[0].text
    new = " ".join(out.strip().strip('"').split())[:MAX_GUIDE_CHARS]
    return new or guide


def evolve(assistant: Any, model, mode: str, questions: Sequence[Mapping[str, Any]],
           updates: Mapping[str, tuple[str | None, str]], time: str = "") -> dict[str, Any] | None:
    """Rewrite ``assistant.guide`` in place; returns the record of the change and the feedback
    (None: nothing to do). Complete feedback asks the assistant, whose memory has not changed
    since it answered at ``time``, what it retrieves for each question."""
    if mode == "none" or not can_evolve(assistant):
        return None
    if mode == "complete":
        questions = [dict(q, memories=q.get("memories", assistant.shown_memory(q["question"], time))) for q in questions]
    before = assistant.guide
    feedback = feedback_text(mode, questions, updates)
    assistant.guide = rewrite_guide(model, before, feedback)
    return {"mode": mode, "before": before, "after": assistant.guide, "feedback": feedback}
