"""Per-session questions for the construction environment (MemoryGym-v0).

After each session the env asks a few questions whose answers a good memory must hold by now.
They are written from the world's truth, in the first person, each with a gold answer and
multiple-choice options (MemBuilder's mix, protocols §2):

* single-session: a value the user revealed in this session ("How do I make my coffee?");
* multi-session: this session plus an earlier one (a value before and after a change, or a
  value revealed now together with one revealed earlier);
* temporal: when something was said or changed ("When did I first mention ...?"); its gold is
  a date, and ``meta["about"]`` holds the value that date is about, so evidence scoring can ask
  for the fact (the date with the value), not any line that carries the same date.

Every question's ``meta["states"]`` gives, for each variable it needs, the values the user has
revealed so far (the last is current; the earlier ones were replaced) and how each value may be
written, so stale-aware scoring can tell a memory that tracked the change from one that did not.

The mix (default 50/30/20) and the count per session come from ``SessionQAConfig``; when a
category has too few candidates for a session the others fill in, so every session that reveals
something gets at least 3 questions.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from memgym_env.conversation import QAItem
from memgym_env.world.config import QA_CATEGORIES, SessionQAConfig
from memgym_env.world.oracle import variable_info
from memgym_env.world.types import VariableInfo, WorldUser

MAX_CHOICES = 4


@dataclass
class _Said:
    """One value revealed in one session."""

    session_id: str
    date: str
    var: str
    value: str
    old: str | None  # the value it replaced, None when first revealed


@dataclass
class _Candidate:
    category: str
    question: str
    answer: str
    wrong: list[str]
    evidence: list[str]
    variables: list[str]
    about: str | None = None  # temporal: the value the date is about


def category_counts(n: int, mix: dict[str, float]) -> dict[str, int]:
    """Split ``n`` questions by ``mix`` with largest remainders (ties go to the earlier category)."""
    total = sum(mix.get(c, 0.0) for c in QA_CATEGORIES)
    exact = {c: n * mix.get(c, 0.0) / total for c in QA_CATEGORIES}
    counts = {c: int(exact[c]) for c in QA_CATEGORIES}
    rest = sorted(QA_CATEGORIES, key=lambda c: (-(exact[c] - counts[c]), QA_CATEGORIES.index(c)))
    for c in rest[: n - sum(counts.values())]:
        counts[c] += 1
    return counts


def _choices(answer: str, wrong: list[str], rng: random.Random) -> list[str]:
    options = [answer] + rng.sample(wrong, min(len(wrong), MAX_CHOICES - 1))
    rng.shuffle(options)
    return options


def _candidates(user: WorldUser, said_now: list[_Said], said_before: list[_Said], dates: list[str]) -> list[_Candidate]:
    out: list[_Candidate] = []
    info: dict[str, VariableInfo] = {s.var: variable_info(user, s.var) for s in said_now + said_before}
    values = user.state_schema
    latest_before: dict[str, _Said] = {}
    for s in said_before:
        latest_before[s.var] = s

    for s in said_now:
        i = info[s.var]
        others = [i.text(v) for v in values[s.var] if v != s.value]
        out.append(_Candidate("single-session", i.question(), i.text(s.value), others, [s.session_id], [s.var]))
        out.append(_Candidate("single-session", f"What did I tell you about my {i.title.lower()} on {s.date}?",
                              i.text(s.value), others, [s.session_id], [s.var]))
        other_dates = [d for d in dates if d != s.date]
        if s.old is None:
            out.append(_Candidate("temporal", f"When did I first tell you about my {i.title.lower()}?",
                                  s.date, other_dates, [s.session_id], [s.var], about=i.text(s.value)))
        else:
            out.append(_Candidate("temporal", f"When did I mention that my {i.title.lower()} had changed to "
                                  f"{i.text(s.value)}?", s.date, other_dates, [s.session_id], [s.var],
                                  about=i.text(s.value)))
            before = latest_before.get(s.var)
            pairs = [(a, b) for a in values[s.var] for b in values[s.var] if a != b and (a, b) != (s.old, s.value)]
            fmt = lambda a, b, i=i: f"before: {i.text(a)}; now: {i.text(b)}"  # noqa: E731
            out.append(_Candidate("multi-session", f"What was my {i.title.lower()} before the change I told you "
                                  f"about on {s.date}, and what is it now?", fmt(s.old, s.value),
                                  [fmt(a, b) for a, b in pairs],
                                  ([before.session_id] if before else []) + [s.session_id], [s.var]))
        for var, earlier in latest_before.items():
            if var in {x.var for x in said_now}:
                continue
            j = info[var]
            fmt2 = lambda a, b, i=i, j=j: f"{i.title}: {i.text(a)}; {j.title}: {j.text(b)}"  # noqa: E731
            wrong = [fmt2(a, b) for a in values[s.var] for b in values[var] if (a, b) != (s.value, earlier.value)]
            out.append(_Candidate("multi-session", f"Putting together what I've told you, what are my "
                                  f"{i.title.lower()} and my {j.title.lower()} now?", fmt2(s.value, earlier.value),
                                  wrong, [earlier.session_id, s.session_id], [s.var, var]))
    # Temporal questions about earlier changes of variables not touched now.
    for var, earlier in latest_before.items():
        if earlier.old is not None and var not in {x.var for x in said_now}:
            j = info[var]
            out.append(_Candidate("temporal", f"When did I last tell you that my {j.title.lower()} changed?",
                                  earlier.date, [d for d in dates if d != earlier.date], [earlier.session_id], [var],
                                  about=j.text(earlier.value)))
    return out


def value_states(user: WorldUser, variable: str, history: list[str]) -> dict:
    """What stale-aware scoring needs of one variable (``memgym_env.construction.state_values``):
    the values revealed so far, in order (the last is current, earlier ones are superseded), and
    how each value of its schema is written (its readable text; raw names such as ``office`` are
    common words, so they are not matched)."""
    info = variable_info(user, variable)
    phrasings = {v: [info.text(v)] for v in [*user.state_schema.get(variable, []), *history]}
    # Another variable's value that contains one of these ("a french press" holds "french"): the
    # matcher reads such a span as that other value, not as this variable's.
    mine = [re.compile(rf"(?<!\w){re.escape(p.casefold())}(?!\w)") for ps in phrasings.values() for p in ps]
    masks = sorted({text for other, values in user.state_schema.items() if other != variable
                    for text in (variable_info(user, other).text(v) for v in values)
                    if any(m.search(text.casefold()) for m in mine)})
    return {"history": list(history), "phrasings": phrasings, **({"masks": masks} if masks else {})}


def session_qa(user: WorldUser, config: SessionQAConfig | None = None, seed: int = 0) -> list[QAItem]:
    """Questions for every session of ``user``; ``QAItem.session`` names the session they follow."""
    config = config or SessionQAConfig()
    known: dict[str, str] = {}
    history: dict[str, list[str]] = {}  # variable -> the values revealed so far, in order
    said_before: list[_Said] = []
    dates: list[str] = []
    items: list[QAItem] = []
    for ref in user.sessions():
        s = ref.session
        dates.append(s.date)
        said_now = []
        for var, value in s.exposed_states.items():
            if known.get(var) != value:
                said_now.append(_Said(ref.id, s.date, var, value, known.get(var)))
                known[var] = value
                history.setdefault(var, []).append(value)
        rng = random.Random(f"memgym-session-qa-{seed}-{user.id}-{ref.id}")
        pools = {c: [] for c in QA_CATEGORIES}
        for cand in _candidates(user, said_now, said_before, sorted(set(dates))):
            if cand.wrong:  # a question with a single possible answer tests nothing
                pools[cand.category].append(cand)
        for pool in pools.values():
            rng.shuffle(pool)
        want = category_counts(config.per_session, config.mix)
        chosen: list[_Candidate] = []
        for c in QA_CATEGORIES:
            chosen += pools[c][: want[c]]
            del pools[c][: want[c]]
        leftovers = [x for c in QA_CATEGORIES for x in pools[c]]
        chosen += leftovers[: config.per_session - len(chosen)]
        for k, cand in enumerate(chosen):
            items.append(QAItem(
                id=f"{user.id}:{ref.id}:q{k}", question=cand.question, answer=cand.answer, category=cand.category,
                evidence=list(dict.fromkeys(cand.evidence)), session=ref.id, question_date=s.session_time,
                choices=_choices(cand.answer, cand.wrong, rng),
                meta={"variables": cand.variables, **({"about": cand.about} if cand.about else {}),
                      "states": {v: value_states(user, v, history.get(v, [])) for v in cand.variables}},
            ))
        said_before += said_now
    return items
