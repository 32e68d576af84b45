"""Whether the world's oracle writes only what its writer was given: the session, its time and the memory
written before (``membuilder.memory.grounding``'s measure, applied to the expert instead of a policy).

SFT copies the oracle, so an entry grounded in nothing the writer was given teaches the policy to invent:
a life event no session tells (``WorldConfig.tell_event``) is the case this was written for.
"""

from __future__ import annotations

from membuilder.memory.grounding import Grounding, content_words, share_in, written_units
from membuilder.memory.ops import AGENTS
from memgym_env.world.oracle import expert_steps
from memgym_env.world.to_conversation import user_sessions
from memgym_env.world.types import WorldUser


def oracle_grounding(user: WorldUser) -> dict[str, Grounding]:
    """Per agent, how much of what the oracle writes for ``user`` was in the session, its time or the memory
    written before it."""
    out = {a: Grounding() for a in AGENTS}
    known: set[str] = set()  # content words of every entry the oracle wrote before (a superset of any view of them)
    core = ""
    for step, session in zip(expert_steps(user), user_sessions(user), strict=True):
        here = known | content_words(session.render()) | content_words(session.time or "") | content_words(core)
        for a in AGENTS:  # the four agents write side by side: none sees what another writes this session
            for unit in written_units(step.ops[a], core):
                out[a].add(share_in(unit, here))
                known |= content_words(unit)
        core = step.core_after
    return out
