"""Structured user worlds (AMemGym): who each user is, how their life changes, what they ask.

    from memgym_env.world import generate_world, load_config, read_world, write_world
    world = generate_world(load_config("configs/env/base.yaml"))     # 20 users, seeded, offline
    user = world[0]
    for ref in user.sessions():                                      # every session, in time order
        ref.period, ref.index, ref.id, ref.session.exposed_states, ref.session.query
    steps = expert_steps(user)                  # oracle: steps[k].outputs["semantic"] is agent JSON
    conv = user_to_conversation(user)           # Conversation with per-session QAItems
    period_questions(user, period=3)            # the multiple-choice questions with today's answer

Modules: ``types`` (records), ``data_json`` (the official file), ``validate``, ``config``,
``catalog`` + ``catalog/*.yaml``, ``offline`` (generator), ``llm_generator``, ``oracle``,
``session_qa``, ``to_conversation``, ``show`` (a readable timeline).
"""

from memgym_env.world.config import SessionQAConfig, WorldConfig, load_config
from memgym_env.world.data_json import dumps_world, read_world, user_from_dict, user_to_dict, write_world
from memgym_env.world.offline import generate_user, generate_world
from memgym_env.world.oracle import ExpertStep, OracleExpert, expert_steps
from memgym_env.world.session_qa import session_qa
from memgym_env.world.to_conversation import period_questions, user_to_conversation
from memgym_env.world.types import (
    AnswerChoice,
    Period,
    Profile,
    Question,
    SessionRef,
    StateUpdate,
    Turn,
    VariableInfo,
    World,
    WorldError,
    WorldSession,
    WorldUser,
)
from memgym_env.world.validate import validate_world, world_issues

__all__ = [
    "AnswerChoice", "ExpertStep", "OracleExpert", "Period", "Profile", "Question", "SessionQAConfig", "SessionRef",
    "StateUpdate", "Turn", "VariableInfo", "World", "WorldConfig", "WorldError", "WorldSession", "WorldUser",
    "dumps_world", "expert_steps", "generate_user", "generate_world", "load_config", "period_questions",
    "read_world", "session_qa", "user_from_dict", "user_to_conversation", "user_to_dict", "validate_world",
    "world_issues", "write_world",
]
