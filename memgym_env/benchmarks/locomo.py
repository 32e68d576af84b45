"""Read LoCoMo (``locomo10.json`` shape) into ``Conversation``s.

The file is a list of samples ``{sample_id, conversation, qa, ...}``. ``conversation`` holds
``speaker_a``, ``speaker_b``, ``session_<n>`` (a list of turns) and ``session_<n>_date_time``.
Quirks handled here (protocols §5):

- some ``session_<n>_date_time`` keys have no session: only list-valued ``session_<n>`` keys
  are sessions, ordered by their number;
- image turns carry ``img_url`` and a ``blip_caption``: the caption is rendered into the text
  so a text-only memory system still sees what was shared;
- category 5 (adversarial) items usually have only ``adversarial_answer``: their gold
  ``answer`` is ``None`` and the tempting wrong answer is kept in ``meta``;
- integer answers are cast to text;
- evidence ids that do not name a turn are kept, listed in ``meta['unresolved_evidence']`` and
  counted; ids written together ("D8:6; D9:17") are split first.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from memgym_env.conversation import Conversation, Message, QAItem, Session

from .bounds import BOUNDS, clip
from .loading import Problems, as_text, field_fault, read_json

# The category numbers as they are in the file. Some harnesses swap 1 and 3; reports print this.
LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
HEADLINE_CATEGORIES = (1, 2, 3, 4)  # category 5 is reported apart

_SESSION_KEY = re.compile(r"session_(\d{1,9})")  # int() refuses over 4,300 digits


def render_turn_text(turn: dict[str, Any]) -> str:
    """The turn's text, with the caption of a shared image appended."""
    text = turn.get("text") or ""
    if turn.get("img_url") or turn.get("blip_caption"):
        caption = turn.get("blip_caption")
        text = f"{text} [shares an image: {caption}]" if caption else f"{text} [shares an image]"
    return text.strip()


def _read_sessions(sample_id: str, conv: dict[str, Any], where: str, problems: Problems) -> list[Session]:
    numbered = []
    for key, value in conv.items():
        m = _SESSION_KEY.fullmatch(key)
        if m and not isinstance(value, list):  # dropping it would silently lose the session's turns
            problems.bad(f"{where}: field '{key}' must be a list of turns, got {type(value).__name__}")
        elif m:
            numbered.append((int(m.group(1)), key, value))
    numbered.sort()
    speakers = {conv.get("speaker_a"): "user", conv.get("speaker_b"): "assistant"}
    sessions = []
    for _, key, turns in numbered:
        fault = field_fault(conv, (f"{key}_date_time",))
        if fault:
            problems.bad(f"{where}: {fault}")
            continue
        messages = []
        for j, turn in enumerate(turns):
            here = f"{where}, {key}[{j}]"
            if not isinstance(turn, dict):
                problems.bad(f"{here}: turn is not an object")
                continue
            missing = [f for f in ("speaker", "dia_id") if not isinstance(turn.get(f), str)]
            if "text" not in turn and not turn.get("blip_caption"):
                missing.append("text")
            if missing:
                problems.bad(f"{here}: no '{missing[0]}'")
                continue
            fault = field_fault(turn, ("text", "blip_caption"))
            if fault:
                problems.bad(f"{here}: {fault}")
                continue
            meta = {"id": turn["dia_id"]}
            for extra in ("img_url", "blip_caption", "query"):
                if extra in turn:
                    meta[extra] = turn[extra]
            messages.append(
                Message(
                    role=speakers.get(turn["speaker"], "user"),
                    content=render_turn_text(turn),
                    speaker=turn["speaker"],
                    meta=meta,
                )
            )
        sessions.append(Session(id=key, time=conv.get(f"{key}_date_time"), messages=messages))
    return sessions


def _is_text(value: Any) -> bool:
    try:
        as_text(value)
        return True
    except TypeError:
        return False


def _split_evidence(raw: list[Any]) -> list[str]:
    out = []
    for e in raw:
        out.extend(part.strip() for part in str(e).split(";") if part.strip())
    return out


def _read_qa(sample_id: str, qa: list[Any], where: str, turn_session: dict[str, str],
             session_order: dict[str, int], problems: Problems) -> list[QAItem]:
    items = []
    for i, q in enumerate(qa):
        here = f"{where}, qa[{i}]"
        if not isinstance(q, dict):
            problems.bad(f"{here}: not an object")
            continue
        if not isinstance(q.get("question"), str):
            problems.bad(f"{here}: no 'question'")
            continue
        category = q.get("category")
        if type(category) is not int or category not in LOCOMO_CATEGORIES:  # True == 1 and 1.0 == 1: not categories
            problems.bad(f"{here}: field 'category' is {repr(clip(category)) if isinstance(category, str) else clip(category)} ({type(category).__name__}), "
                         "expected an integer 1-5")
            continue
        if "answer" not in q and "adversarial_answer" not in q:
            problems.bad(f"{here}: no 'answer' and no 'adversarial_answer'")
            continue
        if "answer" not in q and category != 5:
            problems.bad(f"{here}: category {category} item has no 'answer'")
            continue
        evidence_raw = q.get("evidence", [])
        if not isinstance(evidence_raw, list) or not all(isinstance(e, (str, int)) for e in evidence_raw):
            problems.bad(f"{here}: 'evidence' is not a list of turn ids")
            continue
        try:
            answer, adversarial = (as_text(q.get(f)) for f in ("answer", "adversarial_answer"))
        except TypeError:
            wrong = next(f for f in ("answer", "adversarial_answer") if not _is_text(q.get(f)))
            problems.bad(f"{here}: field '{wrong}' must be text or a number, got {type(q[wrong]).__name__}")
            continue
        evidence = _split_evidence(evidence_raw)
        meta: dict[str, Any] = {
            "category_name": LOCOMO_CATEGORIES[category],
            "unresolved_evidence": [e for e in evidence if e not in turn_session],
        }
        if "adversarial_answer" in q:
            meta["adversarial_answer"] = adversarial
        if evidence != [str(e) for e in evidence_raw]:
            meta["evidence_raw"] = evidence_raw
        if not isinstance(q.get("answer"), (str, type(None))):
            meta["answer_was"] = type(q["answer"]).__name__
        resolved = [turn_session[e] for e in evidence if e in turn_session]
        last = max(resolved, key=session_order.__getitem__) if resolved else None
        items.append(QAItem(id=f"{sample_id}/qa{i}", question=q["question"], answer=answer,
                            category=category, evidence=evidence, session=last, meta=meta))
    return items


def read_locomo(path: str | Path, problems: Problems | None = None) -> list[Conversation]:
    """Read a LoCoMo file (a list of samples, or one sample) into one ``Conversation`` per sample."""
    problems = problems or Problems()
    data = read_json(path, BOUNDS["locomo"])
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        problems.bad(f"LoCoMo file {path}: expected a list of samples, got {type(data).__name__}")
        return []
    conversations = []
    first_seen: dict[str, int] = {}  # sample id -> its position: results are keyed by it
    for k, sample in enumerate(data):
        if not isinstance(sample, dict):
            problems.bad(f"LoCoMo file {path}, sample #{k}: not an object")
            continue
        sample_id = sample.get("sample_id")
        if not isinstance(sample_id, (str, int)) or isinstance(sample_id, bool):  # results are keyed by it
            got = "none" if sample_id is None else type(sample_id).__name__
            problems.bad(f"LoCoMo file {path}, sample #{k}: field 'sample_id' must be text, got {got}")
            continue
        where = f"LoCoMo file {path}, sample {clip(str(sample_id))}"
        if str(sample_id) in first_seen:
            problems.bad(f"{where} (#{k}): field 'sample_id' repeats sample #{first_seen[str(sample_id)]}'s")
            continue
        first_seen[str(sample_id)] = k
        if not isinstance(sample.get("conversation"), dict):
            problems.bad(f"{where}: no 'conversation' object")
            continue
        if not isinstance(sample.get("qa"), list):
            problems.bad(f"{where}: no 'qa' list")
            continue
        conv = sample["conversation"]
        fault = field_fault(conv, ("speaker_a", "speaker_b"))
        if fault:
            problems.bad(f"{where}: {fault}")
            continue
        sessions = _read_sessions(sample_id, conv, where, problems)
        turn_session = {m.meta["id"]: s.id for s in sessions for m in s.messages}
        order = {s.id: i for i, s in enumerate(sessions)}
        qa = _read_qa(sample_id, sample["qa"], where, turn_session, order, problems)
        unresolved = sum(len(q.meta["unresolved_evidence"]) for q in qa)
        conversations.append(Conversation(
            id=str(sample_id), sessions=sessions, qa=qa,
            meta={"benchmark": "locomo", "source": str(path), "speakers": [conv.get("speaker_a"), conv.get("speaker_b")],
                  "unresolved_evidence": unresolved},
        ))
    return conversations
