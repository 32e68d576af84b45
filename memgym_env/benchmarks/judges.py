"""LLM-judge prompts and verdict parsing for the three benchmarks (our wording; the rules are
the published ones, protocols §5).

- LoCoMo "J" (prompt ``locomo``): the published, generous criteria of Mem0's judge that
  MemBuilder reuses (protocols §6): an answer that touches on the same topic as the gold answer
  is CORRECT, a date in any format (or a relative phrase) that refers to the same date is
  CORRECT; the label comes back as a JSON object ``{"label": ...}``. ``locomo-strict`` is a
  stricter prompt of ours (the right thing, not only the topic; a missing key fact is WRONG):
  its scores are not comparable with published J. Category 5 items without a gold answer are
  judged on whether the answer declines (both prompts).
- LongMemEval (``longmemeval``): a yes/no question per item, with the per-type rules of the
  official grader, checked one by one: the plain rule (contains the answer, an equivalent, or
  all intermediate steps; a subset is no), temporal-reasoning tolerates off-by-one counts of
  days, weeks or months, knowledge-update accepts older information beside the updated answer,
  single-session-preference is graded against the rubric and needs the personal information
  recalled and used correctly (not every rubric point), abstention (``_abs``) wants the question
  recognised as unanswerable; correct iff "yes".
- PerLTQA (``perltqa``): CORRECT/WRONG against the reference answer, same JSON form as LoCoMo.

A report names the prompt that graded it and the SHA-256 of its text (``prompt_identity``),
because the prompt can move a headline by tens of points.

A verdict that cannot be parsed is ``None``; the report counts it as wrong and says how many.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from membuilder.agents.choice import score_options
from membuilder.llm.base import Sampling
from memgym_env.conversation import QAItem

_SYSTEM = "You are a careful, fair grader of answers to questions about a user's past conversations."

_LABEL_REPLY = 'Reply with one JSON object and nothing else: {"label": "CORRECT"} or {"label": "WRONG"}.'
_YES_NO_REPLY = "Reply with the single word yes or no."

_LOCOMO = """Question: {question}
Gold answer: {gold}
Generated answer: {response}

Grade the generated answer CORRECT or WRONG, and be generous. The gold answer is short; the
generated one may be much longer. As long as it touches on the same topic as the gold answer, it
is CORRECT. For a question about time, it is CORRECT when it refers to the same date or period
as the gold answer, in any format ("May 7th", "7 May 2023") or by a relative phrase ("last
Tuesday") that points there. Otherwise it is WRONG.
{reply}"""

_LOCOMO_STRICT = """Question: {question}
Gold answer: {gold}
Generated answer: {response}

Is the generated answer CORRECT or WRONG? Be generous. It is CORRECT when it points to the same
thing as the gold answer, even if it is longer, worded differently or adds detail. For questions
about time, the same date or period in any format counts (for example "May 7th" and "7 May
2023"), and so does a relative phrase that resolves to it. It is WRONG when it names something
different, leaves out the key fact, or says it does not know.
{reply}"""

_LOCOMO_ADVERSARIAL = """Question: {question}
This question cannot be answered from the conversation: it assumes something that was never
said. A tempting but unsupported answer would be: "{adversarial}".
Generated answer: {response}

The generated answer is CORRECT when it says the information is not available, was not
mentioned or cannot be determined. It is WRONG when it asserts an answer.
{reply}"""

_LME_PLAIN = """Below are a question, its correct answer and a model's response.
Say yes if the response contains the correct answer, is equivalent to it, or gives all the
intermediate steps that lead to it. Say no if the response gives a different answer or only part
of the information the correct answer needs.{extra}

Question: {question}
Correct answer: {gold}
Model response: {response}

Does the response answer the question correctly? {reply}"""

_LME_EXTRA = {
    "temporal-reasoning": " Do not count an off-by-one difference in a number of days, weeks or months as"
                          " an error (for example 18 days instead of 19).",
    "knowledge-update": " If the response mentions older information together with the updated answer, it is"
                        " correct as long as the updated answer matches the correct answer.",
}

_LME_PREFERENCE = """Below are a question, a rubric describing the personalised response the user would
want, and a model's response.
Say yes if the response satisfies the rubric. It does not need to cover every point of the rubric,
but it must recall the user's personal information and use it correctly. Otherwise say no.

Question: {question}
Rubric: {gold}
Model response: {response}

Does the response satisfy the rubric? {reply}"""

_LME_ABSTENTION = """Below are a question that cannot be answered from the user's conversation history, an
explanation of why, and a model's response.
Say yes if the response recognises that the question cannot be answered: for example it says the
information is missing or incomplete, or that only related information was mentioned. Say no if
it answers the question as if the information were known.

Question: {question}
Why it cannot be answered: {gold}
Model response: {response}

Does the response correctly decline? {reply}"""

_PERLTQA = """Question about a person's memories: {question}
Reference answer: {gold}
Generated answer: {response}

Is the generated answer CORRECT or WRONG? It is CORRECT when it states the key facts of the
reference answer (the same people, events, places, dates or attributes), in any wording; extra
detail is fine unless it contradicts the reference. It is WRONG when the key facts are missing,
different, or the answer says it does not know.
{reply}"""


# Each judge prompt by name, with the templates it may use (what its hash covers).
PROMPT_TEXTS = {
    "locomo": (_SYSTEM, _LOCOMO, _LOCOMO_ADVERSARIAL, _LABEL_REPLY),
    "locomo-strict": (_SYSTEM, _LOCOMO_STRICT, _LOCOMO_ADVERSARIAL, _LABEL_REPLY),
    "longmemeval": (_SYSTEM, _LME_PLAIN, *_LME_EXTRA.values(), _LME_PREFERENCE, _LME_ABSTENTION, _YES_NO_REPLY),
    "perltqa": (_SYSTEM, _PERLTQA, _LABEL_REPLY),
}
JUDGE_PROMPTS = tuple(PROMPT_TEXTS)


def prompt_name(benchmark: str, variant: str = "published") -> str:
    """The judge prompt of ``benchmark``: ``published`` (its published criteria) or ``strict``
    (LoCoMo only: our stricter prompt, kept for comparison with earlier runs)."""
    if variant == "published":
        return benchmark
    if variant == "strict" and benchmark == "locomo":
        return "locomo-strict"
    raise ValueError(f"judge prompt {variant!r} for {benchmark}: expected 'published'"
                     + (" or 'strict'" if benchmark == "locomo" else ""))


def prompt_identity(name: str) -> dict[str, str]:
    """The prompt's name and the SHA-256 of its templates, as a report records them."""
    if name not in PROMPT_TEXTS:
        raise ValueError(f"no judge prompt {name!r}; expected one of {JUDGE_PROMPTS}")
    text = "\n\n".join(PROMPT_TEXTS[name])
    return {"name": name, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def judge_prompt(benchmark: str, item: QAItem, response: str) -> list[dict[str, str]]:
    """The chat messages that ask a judge to grade ``response`` to ``item``; ``benchmark`` names
    the prompt (a benchmark, or ``locomo-strict``)."""
    fields: dict[str, Any] = {"question": item.question, "gold": item.answer, "response": response.strip() or "(empty)"}
    if benchmark in ("locomo", "locomo-strict"):
        if item.answer is None:
            text = _LOCOMO_ADVERSARIAL.format(adversarial=item.meta.get("adversarial_answer", ""), reply=_LABEL_REPLY, **fields)
        else:
            template = _LOCOMO if benchmark == "locomo" else _LOCOMO_STRICT
            text = template.format(reply=_LABEL_REPLY, **fields)
    elif benchmark == "longmemeval":
        if item.meta.get("abstention"):
            text = _LME_ABSTENTION.format(reply=_YES_NO_REPLY, **fields)
        elif item.category == "single-session-preference":
            text = _LME_PREFERENCE.format(reply=_YES_NO_REPLY, **fields)
        else:
            text = _LME_PLAIN.format(extra=_LME_EXTRA.get(str(item.category), ""), reply=_YES_NO_REPLY, **fields)
    elif benchmark == "perltqa":
        text = _PERLTQA.format(reply=_LABEL_REPLY, **fields)
    else:
        raise ValueError(f"no judge for benchmark {benchmark!r}")
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": text}]


_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_JSON_OBJECT = re.compile(r"\{[^{}]*\}")


def parse_label(text: str) -> bool | None:
    """CORRECT -> True, WRONG -> False, anything else -> None. Prefers a JSON ``label``."""
    text = _THINK.sub("", text or "")
    for blob in _JSON_OBJECT.findall(text):
        try:
            obj = json.loads(blob)
        except json.JSONDecodeError:
            continue
        label = str(obj.get("label", "")).strip().upper() if isinstance(obj, dict) else ""
        if label in ("CORRECT", "WRONG"):
            return label == "CORRECT"
    # Without JSON, a label counts only where a verdict stands: first word, after "label:" /
    # "verdict:", or alone on the last line. A judge that echoes the instructions ("The generated
    # answer is CORRECT when ...") has not decided anything, even when the echo is cut short.
    label = r"(CORRECT|WRONG|INCORRECT)\b"
    m = (re.match(r"[\W_]*" + label, text, re.I)
         or re.search(r"\b(?:label|verdict|grade)\W{0,4}" + label, text, re.I)
         or re.fullmatch(r"(?:.*\n)?[\W_]*" + label + r"[\W_]*", text.strip(), re.I | re.S))
    return None if m is None else m.group(1).upper() == "CORRECT"


def parse_yes_no(text: str) -> bool | None:
    """A reply that starts with yes/no, else the only one of the two it contains; None otherwise."""
    text = _THINK.sub("", text or "").strip()
    first = re.match(r"\W*(yes|no)\b", text, re.I)
    if first:
        return first.group(1).lower() == "yes"
    found = {w.lower() for w in re.findall(r"\b(yes|no)\b", text, re.I)}
    return (found == {"yes"}) if len(found) == 1 else None


def parse_verdict(benchmark: str, text: str) -> bool | None:
    return parse_yes_no(text) if benchmark == "longmemeval" else parse_label(text)


@dataclass
class Verdict:
    correct: bool | None  # None: the judge's output could not be parsed (counted as wrong)
    raw: str
    margin: float | None = None  # log p(correct) - log p(wrong), when judged by log-probability
    cut: bool = False  # the written verdict stopped at its token limit (a thinking judge still thinking)


JUDGE_MODES = ("generate", "logprob", "calibrated", "auto")

# What each verdict looks like as the judge's whole reply, for scoring by log-probability.
_VERDICT_REPLIES = {"label": ('{"label": "CORRECT"}', '{"label": "WRONG"}'), "yes_no": ("yes", "no")}


def is_local(judge) -> bool:
    """In-process models expose log-probabilities (``choice_logprobs_batch``)."""
    return hasattr(judge, "choice_logprobs_batch") or hasattr(getattr(judge, "model", None), "choice_logprobs_batch")


def judge_margins(judge, benchmark: str, items: list[QAItem], responses: list[str]) -> list[float]:
    """log p(correct verdict) - log p(wrong verdict) per answer, each verdict scored as the
    judge's whole reply (in-process judges only)."""
    yes, no = _VERDICT_REPLIES["yes_no" if benchmark == "longmemeval" else "label"]
    prompts = [judge_prompt(benchmark, it, r) for it, r in zip(items, responses, strict=True)]
    return [s[0] - s[1] for s in score_options(judge, prompts, [[yes, no]] * len(prompts))]


def judge_batch(judge, benchmark: str, items: list[QAItem], responses: list[str], max_new_tokens: int = 24,
                mode: str = "auto", threshold: float | None = None) -> list[Verdict]:
    """Grade many answers with a ``ChatModel``.

    ``generate``: the judge writes its verdict (one batched call) and we parse it. ``logprob``:
    each verdict is scored as the judge's whole reply and the likelier one wins; a judge too small
    to follow the reply format (SmolLM2-135M echoes the instructions) still gives a verdict.
    ``calibrated``: as ``logprob``, but "correct" needs a margin of at least ``threshold``, set
    by the run's judge check on known-right and known-wrong answers (a small judge leans
    towards "correct" whatever it reads). ``auto``: ``logprob`` for in-process models, else
    ``generate``.
    """
    if mode not in JUDGE_MODES:
        raise ValueError(f"judge mode {mode!r}; expected one of {JUDGE_MODES}")
    if mode == "calibrated" and threshold is None:
        raise ValueError("judge mode 'calibrated' needs the threshold from the run's judge check")
    if not items:
        return []
    local = is_local(judge)
    if mode in ("logprob", "calibrated") and not local:
        raise ValueError(f"judge mode {mode!r} needs an in-process judge with log-probabilities; "
                         "use --judge-mode generate for a served model")
    if mode in ("logprob", "calibrated") or (mode == "auto" and local):
        yes, no = _VERDICT_REPLIES["yes_no" if benchmark == "longmemeval" else "label"]
        cut = threshold if mode == "calibrated" else 0.0
        return [Verdict(m >= cut, yes if m >= cut else no, m)
                for m in judge_margins(judge, benchmark, items, responses)]
    prompts = [judge_prompt(benchmark, it, r) for it, r in zip(items, responses, strict=True)]
    outs = judge.generate(prompts, Sampling(temperature=0.0, max_new_tokens=max_new_tokens, stop=["\n\n"]))
    return [Verdict(parse_verdict(benchmark, o.text), o.text, cut=o.finish_reason == "length") for o in outs]
