"""Checks that a world holds together, with messages naming user, period, session and field.

``user_issues`` lists every fault it finds (it never stops at the first, so one run of
``memgym world validate`` shows all that needs fixing); ``validate_world`` raises ``WorldError``
with the list when it is not empty.
"""

from __future__ import annotations

from datetime import datetime

from memgym_env.world.types import World, WorldError, WorldUser

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_DATE_FORMAT = "%Y-%m-%d"
CHOICE_TYPES = ("experience", "random")


def _parse(value: str | None, fmt: str) -> datetime | None:
    try:
        return datetime.strptime(value, fmt) if value is not None else None
    except (TypeError, ValueError):
        return None


def _check_values(user: WorldUser, values: dict[str, str], where: str, issues: list[str], complete: bool = False) -> None:
    schema = user.state_schema
    for var, value in values.items():
        if var not in schema:
            issues.append(f"{where}: variable '{var}' is not in the state schema")
        elif value not in schema[var]:
            issues.append(f"{where}: value '{value}' of '{var}' is not one of {schema[var]}")
    if complete:
        missing = [v for v in schema if v not in values]
        if missing:
            issues.append(f"{where}: no value for {missing}")


def user_issues(user: WorldUser) -> list[str]:
    issues: list[str] = []
    w = user.where
    if not user.user_profile.name.strip():
        issues.append(f"{w(field_name='user_profile.name')}: empty")
    age = user.user_profile.age
    if age is not None and not 0 < age < 130:
        issues.append(f"{w(field_name='user_profile.age')}: {age} is not a plausible age")
    for var, values in user.state_schema.items():
        if len(values) < 2:
            issues.append(f"{w(field_name='state_schema')}: '{var}' needs at least 2 values, has {values}")
        if len(set(values)) != len(values):
            issues.append(f"{w(field_name='state_schema')}: '{var}' repeats a value in {values}")
    if not user.periods:
        issues.append(f"{w(field_name='periods')}: a user needs at least period 0 (the initial state)")
    uuid = user.user_profile.uuid
    if uuid is not None and uuid != user.id:  # sessions and results are filed by id: two names for one user
        issues.append(f"{w(field_name='user_profile.uuid')}: '{uuid[:100]}' is not the user's id '{user.id[:100]}'")
    if not user.qas:
        issues.append(f"{w(field_name='qas')}: empty; a user needs at least one question to be scored on")

    previous: dict[str, str] | None = None
    last_time: datetime | None = None
    last_end: datetime | None = None  # the previous period's end
    for p, period in enumerate(user.periods):
        end = _parse(period.period_end, _DATE_FORMAT)
        start = _parse(period.period_start, _DATE_FORMAT)
        if end is None:
            issues.append(f"{w(p, field_name='period_end')}: '{period.period_end}' is not a YYYY-MM-DD date")
        if p > 0 and start is None:
            issues.append(f"{w(p, field_name='period_start')}: '{period.period_start}' is not a YYYY-MM-DD date")
        if start is not None and end is not None and end < start:
            issues.append(f"{w(p, field_name='period_end')}: {period.period_end} is before the period's start "
                          f"{period.period_start} (time runs backwards)")
        if start is not None and last_end is not None and start < last_end:
            issues.append(f"{w(p, field_name='period_start')}: {period.period_start} is before the previous period's "
                          f"end {user.periods[p - 1].period_end} (periods overlap)")
        last_end = end if end is not None else last_end
        _check_values(user, period.state, w(p, field_name="state"), issues, complete=True)
        for var, up in period.updates.items():
            where = w(p, field_name=f"updates.{var}")
            if var not in user.state_schema:
                issues.append(f"{where}: not in the state schema")
                continue
            before = previous.get(var) if previous is not None else None
            if up.old != before:
                issues.append(f"{where}: old value '{up.old}' but the previous period ended with '{before}'")
            if up.new != period.state.get(var):
                issues.append(f"{where}: new value '{up.new}' but the period's state says '{period.state.get(var)}'")
        if previous is not None:
            for var, value in period.state.items():
                if var in previous and previous[var] != value and var not in period.updates:
                    issues.append(f"{w(p, field_name='state')}: '{var}' changed to '{value}' without an entry in updates")
        for var, cnt in period.update_cnts.items():
            if var not in user.state_schema:
                issues.append(f"{w(p, field_name='update_cnts')}: '{var}' is not in the state schema")
            elif cnt < 0:
                issues.append(f"{w(p, field_name='update_cnts')}: '{var}' has a negative count {cnt}")
        for s, session in enumerate(period.sessions):
            _check_values(user, session.exposed_states, w(p, s, "exposed_states"), issues)
            for var, value in session.exposed_states.items():
                if var in period.state and period.state[var] != value:
                    issues.append(f"{w(p, s, 'exposed_states')}: reveals '{var}' = '{value}' but the period's "
                                  f"state is '{period.state[var]}'")
            if not session.query.strip():
                issues.append(f"{w(p, s, 'query')}: empty")
            t = _parse(session.session_time, _TIME_FORMAT)
            if t is None:
                issues.append(f"{w(p, s, 'session_time')}: '{session.session_time}' is not 'YYYY-MM-DD HH:MM:SS'")
                continue
            if last_time is not None and t < last_time:
                issues.append(f"{w(p, s, 'session_time')}: {session.session_time} is earlier than the session before it")
            if end is not None and t.date() > end.date():
                issues.append(f"{w(p, s, 'session_time')}: {session.session_time} is after the period end {period.period_end}")
            if start is not None and t.date() < start.date():
                issues.append(f"{w(p, s, 'session_time')}: {session.session_time} is before the period start "
                              f"{period.period_start}")
            last_time = t
            for k, turn in enumerate(session.messages):
                if turn.role not in ("user", "assistant", "system"):
                    issues.append(f"{w(p, s, f'messages[{k}].role')}: '{turn.role}' is not user/assistant/system")
        previous = dict(period.state)

    for q, question in enumerate(user.qas):
        where = f"{w()}, qas[{q}]"
        if not question.query.strip():
            issues.append(f"{where}: field 'query' is empty")
        if not question.required_info:
            issues.append(f"{where}: field 'required_info' is empty")
        unknown = [v for v in question.required_info if v not in user.state_schema]
        if unknown:
            issues.append(f"{where}: field 'required_info' names {unknown}, not in the state schema")
            continue
        seen_states: set[tuple[str, ...]] = set()
        seen_answers: set[str] = set()
        for c, choice in enumerate(question.answer_choices):
            cw = f"{where}, answer_choices[{c}]"
            if len(choice.state) != len(question.required_info):
                issues.append(f"{cw}: field 'state' has {len(choice.state)} values for {len(question.required_info)} variables")
                continue
            _check_values(user, dict(zip(question.required_info, choice.state, strict=True)), f"{cw}, field 'state'", issues)
            if tuple(choice.state) in seen_states:
                issues.append(f"{cw}: field 'state' {choice.state} repeats an earlier choice")
            if choice.answer in seen_answers:
                issues.append(f"{cw}: field 'answer' repeats an earlier choice word for word")
            if choice.type not in CHOICE_TYPES:
                issues.append(f"{cw}: field 'type' is '{choice.type}', expected one of {CHOICE_TYPES}")
            seen_states.add(tuple(choice.state))
            seen_answers.add(choice.answer)
        for p, period in enumerate(user.periods):
            if question.correct_choice(period.state) is None:
                now = [period.state.get(v) for v in question.required_info]
                issues.append(f"{where}: no answer choice matches the state {now} at the end of period {p}")
    return issues


def world_issues(world: World) -> list[str]:
    issues: list[str] = []
    seen: set[str] = set()
    for i, user in enumerate(world.users):
        if user.id in seen:
            issues.append(f"user {i}: id {user.id} repeats an earlier user's id")
        seen.add(user.id)
        issues.extend(user_issues(user))
    return issues


def validate_world(world: World) -> None:
    issues = world_issues(world) if len(world) else ["the world has no users"]
    if issues:
        raise WorldError(issues)
