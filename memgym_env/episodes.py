"""Where MemoryGym-v0 episodes come from: world users or conversation files.

An episode is a ``Conversation`` (sessions + per-session questions) and, when one exists, the
expert's four agent outputs for every session. The expert supplies the memory snapshot before
each session in ``expert`` mode and the reference lengths of the length penalty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from memgym_env.conversation import Conversation, QAItem


@dataclass
class Episode:
    conversation: Conversation
    expert_outputs: list[dict[str, str]] | None = None  # per session: agent -> raw output

    def __post_init__(self) -> None:
        if self.expert_outputs is not None and len(self.expert_outputs) != len(self.conversation.sessions):
            raise ValueError(
                f"conversation {self.conversation.id}: {len(self.expert_outputs)} expert steps for "
                f"{len(self.conversation.sessions)} sessions"
            )


def world_episodes(world, per_session: int = 5, seed: int = 0, max_users: int | None = None) -> list[Episode]:
    from memgym_env.world import SessionQAConfig, expert_steps, user_to_conversation

    qa = SessionQAConfig(per_session=per_session)
    users = list(world)[:max_users] if max_users else list(world)
    return [Episode(user_to_conversation(u, qa, seed), [s.outputs for s in expert_steps(u)]) for u in users]


def generated_world_episodes(config_path: str | None, overrides: dict, per_session: int, seed: int,
                             max_users: int | None) -> list[Episode]:
    from memgym_env.world import generate_world, load_config

    cfg = load_config(config_path, overrides or None)
    return world_episodes(generate_world(cfg), per_session, seed, max_users)


def conversation_episodes(path: str | Path, qa_path: str | Path | None = None,
                          expert_path: str | Path | None = None) -> list[Episode]:
    """Conversations from a JSON file (one ``Conversation`` dict or a list), QA inline or beside it.

    ``qa_path``: a JSON list of ``QAItem`` dicts whose ``session`` names the session they follow.
    ``expert_path``: JSON lines, one per session, ``{"conversation": id, "session": id, "outputs": {...}}``.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    records = data if isinstance(data, list) else [data]
    convs = [Conversation.from_dict(r, where=f"{path}: conversation[{i}]") for i, r in enumerate(records)]
    if qa_path is not None:
        items = json.loads(Path(qa_path).read_text(encoding="utf-8"))
        for i, item in enumerate(items):
            try:
                qa = QAItem(**item)
            except TypeError as exc:
                raise ValueError(f"{qa_path}: qa[{i}]: {exc}") from exc
            target = next((c for c in convs if any(s.id == qa.session for s in c.sessions)), None)
            if target is None:
                raise ValueError(f"{qa_path}: qa[{i}]: field 'session' {qa.session!r} names no session in {path}")
            target.qa.append(qa)
    experts: dict[str, dict[str, dict[str, str]]] = {}
    if expert_path is not None:
        for line in Path(expert_path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                experts.setdefault(rec["conversation"], {})[rec["session"]] = rec["outputs"]
    episodes = []
    for c in convs:
        outs = None
        if c.id in experts:
            missing = [s.id for s in c.sessions if s.id not in experts[c.id]]
            if missing:
                raise ValueError(f"{expert_path}: conversation {c.id}: no expert outputs for sessions {missing[:5]}")
            outs = [experts[c.id][s.id] for s in c.sessions]
        episodes.append(Episode(c, outs))
    return episodes
