"""Expert trajectories for SFT: what an expert wrote for every session and agent, as chat rows.

A trajectory walks a conversation session by session. Before each session the expert's own
memory (its snapshot) gives the observation every agent sees: the session text, its date, the
Core block and the top-``view_k`` entries of the agent's own type nearest the session's lines. The
observation is rendered with ``membuilder.agents.constructor.render_prompt`` (the very prompts
the policy sees at inference and in RL), the expert's output becomes the assistant turn, and
the four outputs are applied to the expert's bank before the next session.

Who the expert is stays open: a ``Writer`` maps an observation to the four raw outputs.

* ``outputs_writer(table)`` replays outputs known in advance (the world oracle's, keyed by
  session): no model, exact, free.
* ``policy_writer(model)`` asks any ``ChatModel`` (a strong API model, a local one) to play
  the four agents.

``build_trajectory(..., jsonl=path)`` appends one JSON line per session as it goes; run it
again on the same file and the sessions already there are replayed into the bank instead of
asked again, so an interrupted LLM run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from membuilder.agents.constructor import OBS_CORE, MemBuilderPolicy, build_observation, render_prompt
from membuilder.llm.base import Sampling
from membuilder.memory.ops import AGENTS, parse, quoted_texts
from membuilder.plumbing.json_files import atomic_write_text
from membuilder.training.prompts import PromptLength, fit_prompt

# An observation -> {agent: raw output}.
Writer = Callable[[Mapping[str, Any]], Mapping[str, str]]


@dataclass(frozen=True)
class SessionText:
    """One session as the memory agents read it."""

    key: str  # stable and unique within the run, e.g. "<user>/<session id>"
    time: str | None
    text: str


def observe(bank, session: SessionText, view_k: int = 20) -> dict[str, Any]:
    """The construction observation of ``session`` from ``bank`` (the same one ``MemoryGym-v0`` gives)."""
    return build_observation(bank, session.text, session.time, view_k)


def outputs_writer(table: Mapping[str, Mapping[str, str]]) -> Callable[[SessionText, Mapping[str, Any]], Mapping[str, str]]:
    """A writer that returns precomputed outputs (session key -> agent -> text)."""

    def write(session: SessionText, obs: Mapping[str, Any]) -> Mapping[str, str]:
        if session.key not in table:
            raise KeyError(f"no expert outputs for session {session.key!r}")
        return table[session.key]

    return write


def policy_writer(model, max_new_tokens: int = 768, temperature: float = 0.0):
    """A writer backed by any ``ChatModel`` playing the four agents (greedy by default)."""
    policy = MemBuilderPolicy(model, Sampling(temperature=temperature, max_new_tokens=max_new_tokens))
    return lambda session, obs: policy.act(obs)


def _read_done(path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """Records already written, and the byte length of the file's intact part."""
    done: dict[str, dict[str, Any]] = {}
    good = 0
    if not path.exists():
        return done, good
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                good += len(line)
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                break  # a line cut by a kill mid-write: it and anything after it are redone
            if not line.endswith(b"\n"):
                break
            if "key" not in record or "outputs" not in record:
                raise ValueError(f"{path}:{n}: not a trajectory record (needs 'key' and 'outputs')")
            done[record["key"]] = record
            good += len(line)
    return done, good


def build_trajectory(sessions: Sequence[SessionText], write, bank, *, view_k: int = 20,
                     jsonl: str | Path | None = None, source: str = "expert") -> list[dict[str, Any]]:
    """Walk ``sessions`` in order with the expert ``write(session, obs)``; one record per session.

    Each record: ``{"key", "time", "source", "observation", "outputs"}``. ``bank`` is the
    expert's memory (empty at the start of a conversation) and is left holding the expert's
    memory after the last session.
    """
    path = Path(jsonl) if jsonl is not None else None
    done, good = _read_done(path) if path is not None else ({}, 0)
    records = []
    out = None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        out = path.open("a", encoding="utf-8")
        out.truncate(good)  # drop a half-written last line left by a killed run
    try:
        for session in sessions:
            obs = observe(bank, session, view_k)
            if session.key in done:
                outputs = done[session.key]["outputs"]
            else:
                written = write(session, obs)
                outputs = {a: str(written[a]) for a in AGENTS}
            record = {"key": session.key, "time": session.time, "source": source,
                      "observation": obs, "outputs": dict(outputs)}
            if out is not None and session.key not in done:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                out.flush()
                os.fsync(out.fileno())
            for agent in AGENTS:  # all four answered from the same snapshot; only now apply
                bank.apply(agent, outputs[agent], time=session.time, session=session.key)
            records.append(record)
    finally:
        if out is not None:
            out.close()
    return records


def _kept(key: str, agent: str, share: float) -> bool:
    # A hash, not an RNG: the same rows are kept in every run and process, whatever the seed.
    return int.from_bytes(hashlib.sha256(f"{key}/{agent}".encode()).digest()[:4], "big") < share * 2**32


def writes_nothing(agent: str, output: str) -> bool:
    """True when an output is valid and holds no operation (e.g. ``{"operations": []}``)."""
    parsed = parse(agent, output)
    return parsed.valid and not parsed.ops


def unseen_quotes(agent: str, output: str, prompt: Sequence[Mapping[str, str]]) -> list[str]:
    """The texts an output's edits quote (REPLACE's old text, UPDATE's and MERGE's old memories) that its prompt
    does not show: an edit the writer could only have made by knowing the bank beyond its view."""
    shown = "\n".join(m["content"] for m in prompt if m["role"] != "assistant")
    quoted = [q for op in parse(agent, output).ops for q in quoted_texts(op)]
    return [q for q in quoted if q.strip() and q.strip() not in shown]


def sft_rows(records: Iterable[Mapping[str, Any]], agents: Sequence[str] = AGENTS, length: PromptLength | None = None,
             max_prompt_tokens: int | None = None, keep_empty: float = 1.0,
             drop_unseen_quotes: bool = False, dropped: list[dict[str, Any]] | None = None,
             empty_memory_repeats: int = 1) -> list[dict[str, Any]]:
    """One chat row per (session, agent): the agent's prompt, then the expert's output as the assistant turn.

    With ``length`` and ``max_prompt_tokens`` the prompt is cut exactly as RL and the held-out
    evaluation cut it (``prompts.fit_prompt``), so SFT trains on the prompts the policy later sees.
    ``keep_empty`` is the share of rows kept whose expert output writes nothing: on a CPU such a
    row costs a whole prompt to teach a five-token answer the model learns from a few examples.
    ``drop_unseen_quotes`` leaves out a row whose expert output edits an entry its (cut) prompt does not show
    (``unseen_quotes``): the expert knows its whole bank, the policy only the view, so such a row teaches it to
    invent the text it edits. Each row left out for it is appended to ``dropped`` when given.
    ``empty_memory_repeats`` takes the rows of a session that starts from an empty memory (a user's first) that
    many times: a user has one such session among dozens, so a small policy learns the editing actions of
    later sessions and writes REPLACE or UPDATE on a memory that holds nothing.
    """
    if not 0.0 <= keep_empty <= 1.0:
        raise ValueError(f"keep_empty must be in [0, 1], got {keep_empty}")
    if empty_memory_repeats < 1:
        raise ValueError(f"empty_memory_repeats must be at least 1, got {empty_memory_repeats}")
    rows = []
    for r in records:
        for agent in agents:
            if keep_empty < 1.0 and writes_nothing(agent, r["outputs"][agent]) and not _kept(r["key"], agent, keep_empty):
                continue
            prompt = (fit_prompt(agent, r["observation"], length, max_prompt_tokens) if length
                      else render_prompt(agent, r["observation"]))
            if drop_unseen_quotes and (unseen := unseen_quotes(agent, r["outputs"][agent], prompt)):
                if dropped is not None:
                    dropped.append({"session_key": r["key"], "agent": agent, "unseen": unseen})
                continue
            messages = prompt + [{"role": "assistant", "content": r["outputs"][agent]}]
            row = {"messages": messages, "session_key": r["key"], "agent": agent, "source": r.get("source", "expert")}
            rows += [row] * (empty_memory_repeats if starts_empty(r["observation"]) else 1)
    return rows


def starts_empty(observation: Mapping[str, Any]) -> bool:
    """True when an observation shows no memory at all: Core holds nothing and no agent's view an entry."""
    return not observation.get(OBS_CORE) and not any(observation.get(agent) for agent in AGENTS[1:])


def to_dataset(rows: Sequence[Mapping[str, Any]]):
    """A ``datasets.Dataset`` of the rows (columns ``messages``, ``session_key``, ``agent``, ``source``)."""
    from datasets import Dataset

    return Dataset.from_list([dict(r) for r in rows])


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    """Write rows as JSON lines atomically (a temporary file renamed into place)."""
    return atomic_write_text(path, "".join(json.dumps(dict(row), ensure_ascii=False) + "\n" for row in rows))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
