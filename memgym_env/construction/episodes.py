"""Where MemoryGym-v0 episodes come from: world users or conversation files.

An episode is a ``Conversation`` (sessions + per-session questions) and, when one exists, the
expert's four agent outputs for every session. The expert supplies the memory snapshot before
each session in ``expert`` mode and the reference lengths of the length penalty.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from membuilder.memory import EmbeddingCache, MemoryBank
from membuilder.plumbing.json_files import loads_guarded, read_json
from memgym_env.conversation import Conversation, QAItem
from memgym_env.world import (
    SessionQAConfig,
    expert_steps,
    generate_world,
    load_config,
    read_world,
    user_to_conversation,
)


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


_LOADED: dict[str, list[Episode]] = {}


def load_episodes(config: Any) -> list[Episode]:
    """The episodes a ``ConstructionConfig`` names, built once per process.

    SFT, RL and the ladder's evaluation of one run name the same world, so they share one
    generated world (and one set of conversations) instead of each generating its own.
    """
    c = config
    key = json.dumps([c.source, c.world_path, c.world_config, c.world_overrides, c.conversation_path, c.qa_path,
                      c.expert_path, c.max_users, c.questions_per_session], sort_keys=True, default=str)
    if key not in _LOADED:
        if c.source == "conversation":
            if not c.conversation_path:
                raise ValueError("source 'conversation' needs conversation_path")
            episodes = conversation_episodes(c.conversation_path, c.qa_path, c.expert_path)
        elif c.world_path:
            episodes = world_episodes(read_world(c.world_path), c.questions_per_session, 0, c.max_users)
        else:
            episodes = generated_world_episodes(c.world_config, c.world_overrides, c.questions_per_session, 0,
                                                c.max_users)
        _LOADED[key] = episodes
    return _LOADED[key]


def expert_snapshots(episode: Episode, cache: EmbeddingCache, limit: int | None = None) -> list[MemoryBank]:
    """The expert's memory before each of the first ``limit`` sessions, then after the last of
    them, as O(1) forks: ``len(result) == sessions + 1``.

    This is MemBuilder's training state: the snapshot a session's candidates are written into.
    """
    if episode.expert_outputs is None:
        raise ValueError(f"conversation {episode.conversation.id}: no expert outputs to build snapshots from "
                         "(give expert_path, or use snapshot 'on_policy')")
    bank, snapshots = MemoryBank(cache=cache), []
    for session, outputs in list(zip(episode.conversation.sessions, episode.expert_outputs))[:limit]:
        snapshots.append(bank.fork())
        for agent, text in outputs.items():
            bank.apply(agent, text, time=session.time, session=session.id)
    return snapshots + [bank]


def world_episodes(world, per_session: int = 5, seed: int = 0, max_users: int | None = None) -> list[Episode]:
    qa = SessionQAConfig(per_session=per_session)
    users = list(world)[:max_users] if max_users else list(world)
    return [Episode(user_to_conversation(u, qa, seed), [s.outputs for s in expert_steps(u)]) for u in users]


def generated_world_episodes(config_path: str | None, overrides: dict, per_session: int, seed: int,
                             max_users: int | None) -> list[Episode]:
    cfg = load_config(config_path, overrides or None)
    return world_episodes(generate_world(cfg), per_session, seed, max_users)


def conversation_episodes(path: str | Path, qa_path: str | Path | None = None,
                          expert_path: str | Path | None = None) -> list[Episode]:
    """Conversations from a JSON file (one ``Conversation`` dict or a list), QA inline or beside it.

    ``qa_path``: a JSON list of ``QAItem`` dicts whose ``session`` names the session they follow.
    ``expert_path``: JSON lines, one per session, ``{"conversation": id, "session": id, "outputs": {...}}``.
    """
    path = Path(path)
    data = read_json(path)
    records = data if isinstance(data, list) else [data]
    convs = [Conversation.from_dict(r, where=f"{path}: conversation[{i}]") for i, r in enumerate(records)]
    if qa_path is not None:
        items = read_json(qa_path)
        if not isinstance(items, list):
            raise ValueError(f"{qa_path}: expected a list of QA items, got {type(items).__name__}")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValueError(f"{qa_path}: qa[{i}]: expected an object, got {type(item).__name__}")
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
        for number, line in enumerate(Path(expert_path).read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                where = f"{expert_path}: line {number}"
                try:
                    rec = loads_guarded(line, where)
                    experts.setdefault(rec["conversation"], {})[rec["session"]] = rec["outputs"]
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise ValueError(f"{where}: not an expert record with 'conversation', 'session' and "
                                     f"'outputs' ({type(exc).__name__}: {exc})") from exc
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
