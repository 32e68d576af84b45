"""Actions built from others, for measuring the reward: writing nothing, and the expert's edits turned into appends.

* ``noop_action``: the four agents write nothing (Core rewrites its block unchanged, the others
  return no operations). Its reward is what the snapshot alone already answers, the floor a
  session's learnable share is measured from.
* ``updates_as_adds`` / ``replaces_as_appends``: the expert's UPDATEs written as ADDs of the new
  text (the old entry stays live) and its Core REPLACEs as APPENDs of the new line (the old line
  stays): the memory a policy builds when it stops editing. A reward that tracks change must
  score these below the expert wherever a question needs the changed value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from membuilder.memory.ops import AGENTS, Add, CoreAppend, CoreReplace, Update, parse, render_ops


def noop_action(core_text: str) -> dict[str, str]:
    """Write nothing. An empty Core block has no valid no-op (every Core operation writes text), so
    Core's output is then an empty object, invalid and worth nothing, as writing nothing is."""
    core = json.dumps({"operation": "REWRITE", "content": core_text}) if core_text.strip() else "{}"
    return {"core": core, **{a: json.dumps({"operations": []}) for a in AGENTS if a != "core"}}


def updates_as_adds(action: Mapping[str, str]) -> dict[str, str]:
    """``action`` with every valid UPDATE of an entry agent written as an ADD of its new text."""
    out = dict(action)
    for agent in AGENTS[1:]:
        parsed = parse(agent, action.get(agent, ""))
        if parsed.valid and any(isinstance(op, Update) for op in parsed.ops):
            out[agent] = render_ops(agent, [Add(op.new_memory) if isinstance(op, Update) else op for op in parsed.ops])
    return out


def replaces_as_appends(action: Mapping[str, str]) -> dict[str, str]:
    """``action`` with a valid Core REPLACE written as an APPEND of its new text."""
    out = dict(action)
    parsed = parse("core", action.get("core", ""))
    if parsed.valid and isinstance(parsed.ops[0], CoreReplace):
        out["core"] = render_ops("core", [CoreAppend(parsed.ops[0].new_text)])
    return out
