"""Gymnasium registration of MemGym's environments (done on ``import memgym_env``, cheaply)."""

from __future__ import annotations

import gymnasium as gym


def register_envs() -> None:
    registered = gym.registry
    if "MemoryGym-v0" not in registered:
        gym.register(
            id="MemoryGym-v0",
            entry_point="memgym_env.construction.env:MemoryGymEnv",
            vector_entry_point="memgym_env.construction.env:make_vector_env",
            nondeterministic=False,
        )
    if "MemoryGym-Interactive-v0" not in registered:
        gym.register(
            id="MemoryGym-Interactive-v0",
            entry_point="memgym_env.interactive.env:InteractiveEnv",
            nondeterministic=False,
        )
