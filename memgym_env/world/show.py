"""A readable timeline of one world user: who they are, what changed when and why, what they asked."""

from __future__ import annotations

import textwrap

from memgym_env.world.oracle import variable_info
from memgym_env.world.types import WorldUser

_WIDTH = 100


def _wrap(text: str, indent: str) -> str:
    return textwrap.fill(text, _WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def render_user(user: WorldUser, messages: bool = False) -> str:
    p = user.user_profile
    lines = [f"{p.name} ({p.age}, {p.gender}, {p.marital_status}) - {p.occupation}", f"id {user.id}"]
    if p.complementary_info:
        lines.append(_wrap(p.complementary_info, ""))
    if p.hobbies_and_interests:
        lines.append(f"Hobbies: {p.hobbies_and_interests}. Skills: {p.skills_and_expertise}.")
    lines.append("")
    for n, period in enumerate(user.periods):
        if n == 0:
            lines.append(f"== Period 0: where things stand on {period.period_end} ==")
            for var, value in period.state.items():
                info = variable_info(user, var)
                lines.append(f"  {info.title}: {info.text(value)}")
        else:
            lines.append(f"== Period {n}: {period.period_start} to {period.period_end} ==")
            if period.period_summary:
                lines.append(_wrap(period.period_summary, "  "))
            for var, up in period.updates.items():
                info = variable_info(user, var)
                lines.append(f"  * {info.title}: {info.text(up.old)} -> {info.text(up.new)}")
            if not period.updates:
                lines.append("  (nothing changed)")
        lines.append("  Conversations:")
        for s in period.sessions:
            revealed = ", ".join(f"{variable_info(user, v).title.lower()}" for v in s.exposed_states)
            lines.append(_wrap(f"{s.session_time}  \"{s.query}\"  [reveals {revealed}]", "    "))
            if messages:
                for t in s.messages[1:]:
                    lines.append(_wrap(f"{t.role}: {t.content}", "        "))
        lines.append("")
    lines.append("== Questions (answer depends on the current state) ==")
    last = user.periods[-1].state
    for q in user.qas:
        titles = " + ".join(variable_info(user, v).title.lower() for v in q.required_info)
        lines.append(_wrap(f"Q: {q.query}  [{titles}; {len(q.answer_choices)} choices]", "  "))
        idx = q.correct_choice(last)
        if idx is not None:
            lines.append(_wrap(f"now: {q.answer_choices[idx].answer}", "     "))
    return "\n".join(lines)
