"""Read LongMemEval (oracle, S or M; ``.json`` or ``.json.gz``) into ``Conversation``s.

Each of the 500 questions comes with its own haystack, so each question is one
``Conversation`` with one ``QAItem``. Quirks handled here (protocols §5):

- abstention questions have ids ending in ``_abs``: ``meta['abstention']`` is set, and their
  ``answer`` is the explanation of why the question cannot be answered;
- 32 answers are integers: cast to text;
- sessions stay in the order of the file. Dates are ordered by day only (sessions of one day
  may be listed out of clock order); re-sorting would change what "latest" means, so we don't;
- oracle and S carry different dates for the same question: the variant is recorded in
  ``meta['variant']`` and results of different variants must never be mixed.

Evidence: turn ids ``<session id>:<turn index>`` of turns marked ``has_answer``; the evidence
sessions are in ``meta['answer_session_ids']``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memgym_env.conversation import Conversation, Message, QAItem, Session

from .bounds import BOUNDS, clip
from .loading import Problems, as_text, field_fault, iter_json_list

LONGMEMEVAL_TYPES: tuple[str, ...] = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)


def variant_of(path: str | Path) -> str:
    """'oracle', 's' or 'm' from the file name (longmemeval_oracle.json, longmemeval_s_cleaned.json ...)."""
    name = Path(path).name.lower()
    if "oracle" in name:
        return "oracle"
    for tag in ("_s", "_m"):
        if tag + "." in name or tag + "_" in name:
            return tag[1:]
    return "unknown"


def _is_id_or_date(value: Any, field: str) -> bool:
    """Session ids are text (integers are accepted); dates are text or null."""
    if field == "haystack_dates":
        return isinstance(value, (str, type(None)))
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _read_one(rec: Any, k: int, path: str | Path, variant: str, problems: Problems) -> Conversation | None:
    qid = rec.get("question_id", f"#{k}") if isinstance(rec, dict) else f"#{k}"
    where = f"LongMemEval file {path}, question {clip(qid)}"
    if not isinstance(rec, dict):
        problems.bad(f"{where}: not an object")
        return None
    for f in ("question_id", "question_type", "question"):
        if not isinstance(rec.get(f), str):
            problems.bad(f"{where}: no '{f}'")
            return None
    if rec["question_type"] not in LONGMEMEVAL_TYPES:
        problems.bad(f"{where}: unknown 'question_type' {clip(rec['question_type'])!r}")
        return None
    if "answer" not in rec:
        problems.bad(f"{where}: no 'answer'")
        return None
    sessions_raw, ids, dates = (rec.get(f) for f in ("haystack_sessions", "haystack_session_ids", "haystack_dates"))
    for f, v in (("haystack_sessions", sessions_raw), ("haystack_session_ids", ids), ("haystack_dates", dates)):
        if not isinstance(v, list):
            problems.bad(f"{where}: no '{f}' list")
            return None
    for f, v in (("haystack_session_ids", ids), ("haystack_dates", dates)):
        bad = next((i for i, x in enumerate(v) if not _is_id_or_date(x, f)), None)
        if bad is not None:
            problems.bad(f"{where}, {f}[{bad}]: must be text, got {type(v[bad]).__name__}")
            return None
    answer_ids = rec.get("answer_session_ids") or []
    if not isinstance(answer_ids, list) or not all(_is_id_or_date(x, "id") for x in answer_ids):
        problems.bad(f"{where}: field 'answer_session_ids' must be a list of session ids, got {answer_ids!r:.60}")
        return None
    fault = field_fault(rec, ("question_date",))
    if fault:
        problems.bad(f"{where}: {fault}")
        return None
    if not len(sessions_raw) == len(ids) == len(dates):
        problems.bad(f"{where}: 'haystack_sessions', 'haystack_session_ids' and 'haystack_dates' differ in length "
                     f"({len(sessions_raw)}, {len(ids)}, {len(dates)})")
        return None
    sessions, evidence = [], []
    for i, (sid, date, turns) in enumerate(zip(ids, dates, sessions_raw, strict=True)):
        if not isinstance(turns, list):
            problems.bad(f"{where}, haystack_sessions[{i}]: not a list of turns")
            return None
        messages = []
        for j, t in enumerate(turns):
            if not isinstance(t, dict) or not isinstance(t.get("content"), str) or t.get("role") not in ("user", "assistant"):
                field = "role" if isinstance(t, dict) and isinstance(t.get("content"), str) else "content"
                problems.bad(f"{where}, haystack_sessions[{i}][{j}]: missing or bad '{field}'")
                continue
            turn_id = f"{sid}:{j}"
            meta: dict[str, Any] = {"id": turn_id}
            if t.get("has_answer"):
                meta["has_answer"] = True
                evidence.append(turn_id)
            messages.append(Message(role=t["role"], content=t["content"], meta=meta))
        sessions.append(Session(id=str(sid), time=date, messages=messages))
    try:
        answer = as_text(rec["answer"])
    except TypeError as exc:
        problems.bad(f"{where}: field 'answer': {exc}")
        return None
    answer_sessions = [str(s) for s in answer_ids]
    order = {s.id: i for i, s in enumerate(sessions)}
    present = [s for s in answer_sessions if s in order]
    qa = QAItem(
        id=rec["question_id"],
        question=rec["question"],
        answer=answer,
        category=rec["question_type"],
        evidence=evidence,
        session=max(present, key=order.__getitem__) if present else None,
        question_date=rec.get("question_date"),
        meta={"abstention": rec["question_id"].endswith("_abs"), "answer_session_ids": answer_sessions,
              **({"answer_was": type(rec["answer"]).__name__} if not isinstance(rec["answer"], str) else {})},
    )
    return Conversation(id=rec["question_id"], sessions=sessions, qa=[qa],
                        meta={"benchmark": "longmemeval", "variant": variant, "source": str(path)})


def read_longmemeval(path: str | Path, problems: Problems | None = None, variant: str | None = None,
                     limit: int | None = None) -> list[Conversation]:
    """Read a LongMemEval file into one ``Conversation`` per question (the first ``limit`` only,
    if given: the file is streamed, so that much is all that is read)."""
    problems = problems or Problems()
    variant = variant or variant_of(path)
    out: list[Conversation] = []
    first_seen: dict[str, int] = {}  # question id -> its record number
    for k, rec in enumerate(iter_json_list(path, BOUNDS["longmemeval"])):
        if limit is not None and len(out) >= limit:
            break
        conv = _read_one(rec, k, path, variant, problems)
        if conv is None:
            continue
        if conv.id in first_seen:  # results are keyed by question id: a second one would replace the first
            problems.bad(f"LongMemEval file {path}, question {clip(conv.id)} (record {k}): field 'question_id' "
                         f"repeats record {first_seen[conv.id]}'s")
            continue
        first_seen[conv.id] = k
        out.append(conv)
    return out
