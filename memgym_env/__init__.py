"""MemGym environments, worlds and scoring.

``import memgym_env`` registers the environments with Gymnasium and imports nothing heavy:

    import gymnasium as gym, memgym_env
    env = gym.make("MemoryGym-v0")
"""

from memgym_env.registration import register_envs

register_envs()
