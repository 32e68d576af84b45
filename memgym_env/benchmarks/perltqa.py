"""Read PerLTQA English v2 (a memory file and a QA file) into one ``Conversation`` per character.

Memory file: ``{name: {profile, profile_description, social_relationship, events, dialogues}}``.
QA file: ``[{name: {profile: [qa], social_relationship: [{id: [qa]}], events: [...], dialogues: [...]}}]``.

The memories become sessions: a "profile" session (one message per profile field, then the
description), a "relationships" session, then one session per event and per dialogue, ordered
by time. Event times are free text ("May 12, 2022", "2012", "during an election"): what parses
is used; an event whose time does not parse takes the time of its dialogue, else goes last.
Every message carries the memory id it came from in ``meta['id']`` (a profile field name,
"1_0", "1_0_0" or "1_0_0#0"), which is what ``Reference Memory`` points to.

``Reference Memory`` is a profile field name or a Python-literal list such as "['1_0_0']": it
is parsed with ``ast.literal_eval`` (never ``eval``). ``Memory Anchors`` phrases are
HTML-unescaped into ``meta['anchors']``; their offsets do not match the English text and are
kept only for reference.

Every field the reader uses is type-checked: a wrongly typed one is one ``BadRecordError``
naming file, character, record (profile field, relationship, event, dialogue or question) and
field, and with ``skip_bad`` that record is skipped (a character whose memories are not an
object is skipped whole).
"""

from __future__ import annotations

import ast
import html
from datetime import datetime
from pathlib import Path
from typing import Any

from memgym_env.conversation import Conversation, Message, QAItem, Session

from .bounds import BOUNDS, clip
from .loading import Problems, field_fault, list_fault, read_json

QA_PARTS = ("profile", "social_relationship", "events", "dialogues")
_TEXT_OR_NUMBER = (str, int, float, type(None))
_OBJECT = (dict, type(None))
_TIME_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%d", "%B %d, %Y", "%b %d, %Y", "%B %Y", "%Y")


def parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    for fmt in _TIME_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    return None


def parse_reference(raw: Any) -> list[str]:
    """'Gender' -> ['Gender']; "['1_0_0', '1_0_1']" -> ['1_0_0', '1_0_1']. Raises ValueError."""
    if isinstance(raw, list):
        value = raw
    elif isinstance(raw, str) and raw.strip().startswith("["):
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"not a list literal: {clip(raw)!r}") from None
    elif isinstance(raw, str) and raw.strip():
        return [raw.strip()]
    else:
        raise ValueError(f"expected a field name or a list of ids, got {clip(raw)!r}")
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
        raise ValueError(f"expected a list of ids, got {clip(raw)!r}")
    return [str(v) for v in value]


def _split_line(line: str, protagonist: str) -> Message:
    speaker, sep, text = line.partition(": ")
    if not sep:
        return Message(role="user", content=line.strip())
    speaker = speaker.strip()
    return Message(role="user" if speaker == protagonist else "assistant", content=text.strip(), speaker=speaker)


def _memory_sessions(name: str, mem: dict[str, Any], where: str, problems: Problems) -> list[Session]:
    profile = mem.get("profile")
    if not isinstance(profile, dict):
        problems.bad(f"{where}: no 'profile' object")
        profile = {}
    head = []
    for k, v in profile.items():
        fault = field_fault(profile, (k,), _TEXT_OR_NUMBER, "text or a number")
        if fault:
            problems.bad(f"{where}, profile: {fault}")
            continue
        head.append(Message(role="user", speaker=name, content=f"{k}: {v}", meta={"id": k}))
    fault = field_fault(mem, ("profile_description",))
    if fault:
        problems.bad(f"{where}: {fault}")
    elif mem.get("profile_description") is not None:
        head.append(Message(role="user", speaker=name, content=mem["profile_description"], meta={"id": "profile_description"}))
    parts = {}
    for part in ("social_relationship", "dialogues", "events"):
        fault = field_fault(mem, (part,), _OBJECT, "an object keyed by id")
        if fault:
            problems.bad(f"{where}: {fault}")
        parts[part] = {} if fault else mem.get(part) or {}
    rels = []
    for rid, r in parts["social_relationship"].items():
        if not isinstance(r, dict) or not isinstance(r.get("Description"), str):
            problems.bad(f"{where}, social_relationship {clip(rid)}: no 'Description'")
            continue
        fault = field_fault(r, ("Supporting Characters", "Relationship"))
        if fault:
            problems.bad(f"{where}, social_relationship {clip(rid)}: {fault}")
            continue
        who = r.get("Supporting Characters", "?")
        rels.append(Message(role="user", speaker=name, content=f"{who} ({r.get('Relationship', '?')}): {r['Description']}",
                            meta={"id": rid, "character": who}))
    dated: list[tuple[datetime | None, int, Session]] = []
    dialogue_time: dict[str, datetime] = {}
    for did, d in parts["dialogues"].items():
        contents = d.get("contents") if isinstance(d, dict) else None
        if not isinstance(contents, dict) or not contents:
            problems.bad(f"{where}, dialogue {clip(did)}: no 'contents' object")
            continue
        fault = field_fault(d, ("events",), (str, int, type(None)), "an event id")
        if fault:
            problems.bad(f"{where}, dialogue {clip(did)}: {fault}")
            continue
        for part, (stamp, lines) in enumerate(contents.items()):
            if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
                problems.bad(f"{where}, dialogue {clip(did)}, contents[{clip(stamp)!r}]: not a list of lines")
                continue
            messages = []
            for j, line in enumerate(lines):
                m = _split_line(line, name)
                m.meta = {"id": did, "turn": j}
                messages.append(m)
            when = parse_time(stamp)
            if when and d.get("events"):
                dialogue_time.setdefault(str(d["events"]), when)
            sid = f"dialogue:{did}" + (f"/{part}" if len(contents) > 1 else "")
            dated.append((when, 1, Session(id=sid, time=stamp, messages=messages, meta={"kind": "dialogue", "event": d.get("events")})))
    for eid, e in parts["events"].items():
        if not isinstance(e, dict) or not isinstance(e.get("content"), str):
            problems.bad(f"{where}, event {clip(eid)}: no 'content'")
            continue
        fault = (field_fault(e, ("summary", "Creation Time", "Theme"))
                 or list_fault(e, "Characters", str, "a list of text"))
        if fault:
            problems.bad(f"{where}, event {clip(eid)}: {fault}")
            continue
        stamp = e.get("Creation Time")
        when = parse_time(stamp) or dialogue_time.get(eid)
        text = f"{e['summary']}. {e['content']}" if e.get("summary") else e["content"]
        msg = Message(role="user", speaker=name, content=text, meta={"id": eid, "characters": e.get("Characters", [])})
        dated.append((when, 0, Session(id=f"event:{eid}", time=stamp if isinstance(stamp, str) else None, messages=[msg],
                                       meta={"kind": "event", "theme": e.get("Theme"), "time_parsed": when is not None})))
    # Known times in order (an event before its same-day dialogue); unknown times last, in file order.
    dated.sort(key=lambda t: (t[0] is None, t[0] or datetime.min, t[1]))
    return [Session(id="profile", time=None, messages=head, meta={"kind": "profile"}),
            Session(id="relationships", time=None, messages=rels, meta={"kind": "relationships"}),
            *(s for _, _, s in dated)]


def _qa_items(name: str, entry: dict[str, Any], where: str, mem_session: dict[str, str],
              order: dict[str, int], problems: Problems) -> list[QAItem]:
    items = []
    for part in QA_PARTS:
        groups = entry.get(part, [])
        if part == "profile":
            groups = [{"profile": groups}]
        if not isinstance(groups, list):
            problems.bad(f"{where}, {part}: not a list")
            continue
        for g, group in enumerate(groups):
            if not isinstance(group, dict):
                problems.bad(f"{where}, {part}[{g}]: not an object")
                continue
            for mem_id, qas in group.items():
                if not isinstance(qas, list):
                    problems.bad(f"{where}, {part} {clip(mem_id)}: expected a list of questions, got {type(qas).__name__}")
                    continue
                for i, q in enumerate(qas):
                    here = f"{where}, {part} {clip(mem_id)}, qa[{i}]"
                    if not isinstance(q, dict):
                        problems.bad(f"{here}: not an object")
                        continue
                    missing = [f for f in ("Question", "Answer") if q.get(f) is None]
                    if missing:
                        problems.bad(f"{here}: no '{missing[0]}'")
                        continue
                    anchors_raw = q.get("Memory Anchors")
                    fault = (field_fault(q, ("Question", "Answer"))
                             or list_fault(q, "Memory Anchors", dict, "a list of objects"))
                    if fault:
                        problems.bad(f"{here}: {fault}")
                        continue
                    try:
                        refs = parse_reference(q.get("Reference Memory"))
                    except ValueError as exc:
                        problems.bad(f"{here}: field 'Reference Memory': {exc}")
                        continue
                    anchors, spans = [], []
                    for a in anchors_raw or []:
                        for phrase, span in a.items():
                            anchors.append(html.unescape(phrase))
                            spans.append(span)
                    found = [mem_session[r] for r in refs if r in mem_session]
                    items.append(QAItem(
                        id=f"{name}/{part}/{mem_id}/{i}", question=q["Question"], answer=q["Answer"], category=part,
                        evidence=refs, session=max(found, key=order.__getitem__) if found else None,
                        meta={"anchors": anchors, "anchor_spans": spans,
                              "unresolved_evidence": [r for r in refs if r not in mem_session]},
                    ))
    return items


def default_qa_path(memory_path: str | Path) -> Path:
    """perltmem_en_v2.json -> perltqa_en_v2.json (same folder, same suffix)."""
    p = Path(memory_path)
    return p.with_name(p.name.replace("perltmem", "perltqa"))


def read_perltqa(memory_path: str | Path, qa_path: str | Path | None = None,
                 problems: Problems | None = None) -> list[Conversation]:
    """One ``Conversation`` per character that has both memories and questions."""
    problems = problems or Problems()
    qa_path = Path(qa_path) if qa_path else default_qa_path(memory_path)
    memories = read_json(memory_path, BOUNDS["perltqa"])
    qa_data = read_json(qa_path, BOUNDS["perltqa"])
    if not isinstance(memories, dict):
        problems.bad(f"PerLTQA memory file {memory_path}: expected an object keyed by character name")
        return []
    if isinstance(qa_data, dict):
        qa_data = [qa_data]
    if not isinstance(qa_data, list):
        problems.bad(f"PerLTQA QA file {qa_path}: expected a list")
        return []
    out = []
    for k, block in enumerate(qa_data):
        if not isinstance(block, dict):
            problems.bad(f"PerLTQA QA file {qa_path}, element {k}: not an object")
            continue
        for name, entry in block.items():
            where = f"PerLTQA QA file {qa_path}, character {clip(name)}"
            if name not in memories:
                problems.bad(f"{where}: no memories for this character in {memory_path}")
                continue
            if not isinstance(entry, dict):
                problems.bad(f"{where}: not an object")
                continue
            mem_where = f"PerLTQA memory file {memory_path}, character {clip(name)}"
            if not isinstance(memories[name], dict):
                problems.bad(f"{mem_where}: expected an object of memories, got {type(memories[name]).__name__}")
                continue
            sessions = _memory_sessions(name, memories[name], mem_where, problems)
            mem_session = {}
            for s in sessions:
                for m in s.messages:
                    mem_session.setdefault(m.meta["id"], s.id)
            order = {s.id: i for i, s in enumerate(sessions)}
            qa = _qa_items(name, entry, where, mem_session, order, problems)
            out.append(Conversation(id=name, sessions=sessions, qa=qa,
                                    meta={"benchmark": "perltqa", "source": str(memory_path), "qa_source": str(qa_path),
                                          "unresolved_evidence": sum(len(q.meta["unresolved_evidence"]) for q in qa)}))
    return out
