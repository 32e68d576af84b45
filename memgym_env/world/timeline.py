"""Dates and session times of a world, and the pronoun rendering of life-event phrases."""

from __future__ import annotations

import calendar
import random
from datetime import date, datetime, timedelta

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def add_months(day: date, months: int) -> date:
    month0 = day.month - 1 + months
    year, month = day.year + month0 // 12, month0 % 12 + 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def period_bounds(start: date, period: int, months: int) -> tuple[date | None, date]:
    """Period 0 ends on ``start``; period p >= 1 runs from start + (p-1)*months to start + p*months."""
    if period == 0:
        return None, start
    return add_months(start, (period - 1) * months), add_months(start, period * months)


def session_times(end: date, count: int, hours: tuple[int, int], rng: random.Random) -> list[str]:
    """One session a day on the last ``count`` days up to ``end``, each at a random evening time."""
    lo, hi = hours
    out = []
    for k in range(count):
        day = end - timedelta(days=count - 1 - k)
        seconds = rng.randrange(lo * 3600, hi * 3600)
        out.append((datetime.combine(day, datetime.min.time()) + timedelta(seconds=seconds)).strftime(TIME_FORMAT))
    return out


_PRONOUNS = {
    "female": {"poss": "her", "obj": "her", "refl": "herself", "subj": "She"},
    "male": {"poss": "his", "obj": "him", "refl": "himself", "subj": "He"},
    "nonbinary": {"poss": "their", "obj": "them", "refl": "themselves", "subj": "They"},
    "first": {"poss": "my", "obj": "me", "refl": "myself", "subj": "I"},
}


def pronouns(gender: str | None) -> dict[str, str]:
    return _PRONOUNS.get((gender or "").lower(), _PRONOUNS["nonbinary"])


def render_event(phrase: str, subject: str, gender: str | None) -> str:
    """``"took {poss} dog out"`` -> ``"Maya took her dog out"`` (or ``"I took my dog out"`` for ``first``)."""
    words = pronouns(gender)
    return f"{subject} " + phrase.format(poss=words["poss"], obj=words["obj"], refl=words["refl"])


def first_person_event(phrase: str) -> str:
    return render_event(phrase, "I", "first")
