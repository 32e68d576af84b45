"""Parsing the notes the agentic-write assistants (AWE, AWI) produce; never raises on model output."""

from __future__ import annotations

import json
import re

# The "what to remember" section of the AWE/AWI memory-update prompts; self-evolution rewrites it.
DEFAULT_GUIDE = ("Facts about the user's own life that could shape future advice: their situation, work, "
                 "health, family, home, habits, routines and preferences, and every change to them with "
                 "when it happened. Skip general knowledge and the assistant's own suggestions.")

MAX_NOTE_CHARS = 400  # a runaway generation must not fill memory with one note
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s*")


def note_lines(text: str, limit: int = 20) -> list[str]:
    """Bulleted or plain lines of a reply; "NONE" (or nothing) means no notes."""
    out = []
    for raw in (text or "").splitlines():
        line = _BULLET.sub("", raw).strip().strip('"').strip()
        if not line or line.upper().rstrip(".") in ("NONE", "N/A", "NOTHING"):
            continue
        out.append(line[:MAX_NOTE_CHARS])
        if len(out) == limit:
            break
    return out


def label_values(text: str, limit: int = 20) -> list[tuple[str, str]]:
    """``label: value`` pairs from lines, or from a JSON list of {"label", "value"} objects."""
    stripped = (text or "").strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, list):
            pairs = [(str(d.get("label", "")).strip(), str(d.get("value", "")).strip())
                     for d in data if isinstance(d, dict)]
            return [(k[:80], v[:MAX_NOTE_CHARS]) for k, v in pairs if k and v][:limit]
    pairs = []
    for line in note_lines(text, limit):
        label, sep, value = line.partition(":")
        if sep and label.strip() and value.strip() and len(label) <= 80:
            pairs.append((label.strip(), value.strip()))
    return pairs
