"""Turn a world user into the common episode format (``memgym_env.conversation``).

Sessions keep their time and recorded messages (a session without messages becomes the user's
opening request alone); ``meta`` keeps the truth (period, event, exposed states) so environments
can score and diagnose. ``qa`` holds the per-session questions of the construction env; the
multiple-choice questions asked at the end of each period come from ``period_questions``.
"""

from __future__ import annotations

from memgym_env.conversation import Conversation, Message, QAItem, Session
from memgym_env.world.config import SessionQAConfig
from memgym_env.world.session_qa import session_qa
from memgym_env.world.types import WorldUser


def user_sessions(user: WorldUser) -> list[Session]:
    name = user.user_profile.name
    sessions = []
    for ref in user.sessions():
        s = ref.session
        turns = s.messages or []
        messages = [Message(role=t.role, content=t.content, speaker=name if t.role == "user" else "assistant")
                    for t in turns] or [Message(role="user", content=s.query, speaker=name)]
        sessions.append(Session(id=ref.id, time=s.session_time, messages=messages, meta={
            "period": ref.period, "index": ref.index, "event": s.event,
            "exposed_states": dict(s.exposed_states), "query": s.query,
        }))
    return sessions


def period_questions(user: WorldUser, period: int) -> list[QAItem]:
    """The user's questions as multiple choice, with the answer that is right at the end of ``period``."""
    state = user.periods[period].state
    items = []
    for q, question in enumerate(user.qas):
        correct = question.correct_choice(state)
        answers = [c.answer for c in question.answer_choices]
        items.append(QAItem(
            id=f"{user.id}:period{period}:qa{q}", question=question.query,
            answer=answers[correct] if correct is not None else None, category="amemgym-mc",
            evidence=[], session=None, question_date=user.periods[period].period_end, choices=answers,
            meta={"required_info": list(question.required_info), "correct_index": correct, "period": period},
        ))
    return items


def user_to_conversation(user: WorldUser, qa: SessionQAConfig | None = None, seed: int = 0,
                         with_session_qa: bool = True) -> Conversation:
    """The user's timeline as a ``Conversation`` with session QA (``seed`` picks the questions)."""
    return Conversation(
        id=user.id,
        sessions=user_sessions(user),
        qa=session_qa(user, qa, seed) if with_session_qa else [],
        meta={"source": "memgym-world", "user": user.user_profile.name,
              "profile": user.user_profile.formatted_str, "num_periods": len(user.periods) - 1},
    )
