"""The JSON form of MemoryGym-v0 scoring requests and rewards, shared by the service and its client.

A ``POST /score`` body is ``{"session_key": str, "candidates": [{agent: raw output} x G],
"task_rewarded": bool (default true)}``; every candidate names all four agents with a string
each. The answer carries one ``CandidateReward`` per candidate, field for field. Floats go
through JSON as Python writes them (shortest round-trip form), so a reward read back equals the
reward computed, bit for bit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from membuilder.memory.ops import AGENTS
from membuilder.plumbing.http import RequestError
from membuilder.reward import CandidateReward

MAX_CANDIDATES = 256
REWARD_FIELDS = ("agent_rewards", "weights", "task_reward", "valid", "length_penalty", "task_rewarded", "dominant",
                 "info")
# Absent from servers that predate the evidence attribution rule (dominant_by_rule) or the quote_miss rule (misquoted)
OPTIONAL_REWARD_FIELDS = ("dominant_by_rule", "misquoted")


def read_score_request(body: Mapping[str, Any]) -> tuple[str, list[dict[str, str]], bool]:
    """``(session_key, candidates, task_rewarded)`` from a request body; a ``RequestError`` (400)
    names the field that is wrong."""
    unknown = sorted(set(body) - {"session_key", "candidates", "task_rewarded"})
    if unknown:
        raise RequestError(f"unknown field(s) {unknown}; a score request has session_key, candidates, task_rewarded")
    key = body.get("session_key")
    if not isinstance(key, str) or not key:
        raise RequestError(f"'session_key' must be a non-empty string such as 'user-0/s1', got {key!r}")
    candidates = body.get("candidates")
    if not isinstance(candidates, list) or not 1 <= len(candidates) <= MAX_CANDIDATES:
        raise RequestError(f"'candidates' must be a list of 1 to {MAX_CANDIDATES} actions "
                           f"(objects with {', '.join(AGENTS)}), got {_describe(candidates)}")
    for i, cand in enumerate(candidates):
        if not isinstance(cand, dict):
            raise RequestError(f"'candidates[{i}]' must be an object of the four agents' outputs, got {_describe(cand)}")
        extra = sorted(set(cand) - set(AGENTS))
        missing = [a for a in AGENTS if a not in cand]
        if extra or missing:
            raise RequestError(f"'candidates[{i}]' must hold exactly {list(AGENTS)}"
                               + (f"; unknown {extra}" if extra else "") + (f"; missing {missing}" if missing else ""))
        for a in AGENTS:
            if not isinstance(cand[a], str):
                raise RequestError(f"'candidates[{i}].{a}' must be a string (the agent's raw output), "
                                   f"got {_describe(cand[a])}")
    rewarded = body.get("task_rewarded", True)
    if not isinstance(rewarded, bool):
        raise RequestError(f"'task_rewarded' must be true or false, got {rewarded!r}")
    return key, candidates, rewarded


def score_request(session_key: str, candidates: Sequence[Mapping[str, str]], task_rewarded: bool = True) -> dict:
    return {"session_key": session_key, "candidates": [{a: c.get(a, "") for a in AGENTS} for c in candidates],
            "task_rewarded": task_rewarded}


def reward_to_json(reward: CandidateReward) -> dict[str, Any]:
    return {name: getattr(reward, name) for name in REWARD_FIELDS + OPTIONAL_REWARD_FIELDS}


def reward_from_json(data: Any, where: str = "reward") -> CandidateReward:
    """A ``CandidateReward`` from its JSON form; a ``ValueError`` says what a malformed one lacks."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {_describe(data)}")
    missing = [f for f in REWARD_FIELDS if f not in data]
    if missing:
        raise ValueError(f"{where}: missing {missing}")
    for name in ("agent_rewards", "weights"):
        values = data[name]
        if not isinstance(values, dict) or set(values) != set(AGENTS) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()):
            raise ValueError(f"{where}.{name}: expected a number for each of {list(AGENTS)}, got {values!r}")
    by_rule = data.get("dominant_by_rule") or {}
    if not isinstance(by_rule, dict):
        raise ValueError(f"{where}.dominant_by_rule: expected an object, got {_describe(by_rule)}")
    misquoted = data.get("misquoted") or {}
    if not isinstance(misquoted, dict) or not all(isinstance(v, bool) for v in misquoted.values()):
        raise ValueError(f"{where}.misquoted: expected true or false for each agent, got {misquoted!r}")
    return CandidateReward(**{name: data[name] for name in REWARD_FIELDS}, dominant_by_rule=dict(by_rule),
                           misquoted=dict(misquoted))


def dumps(payload: Any) -> str:
    """JSON text; NaN or infinity is a bug to surface, never a value to send."""
    return json.dumps(payload, allow_nan=False, default=_plain)


def _plain(value: Any):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
