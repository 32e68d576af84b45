"""MemoryGym-v0: memory construction, one dialogue session a step (the MemBuilder method).

``env`` holds the Gymnasium environment, ``config`` its settings, ``episodes`` the sessions and
their expert snapshots, ``scoring`` the reward's stages, ``answers`` the answer stage and
``trl_reward`` the glue that lets TRL's trainers score completions with it.
"""
