"""``memgym demo``: the main job on the embedded defaults, its report, and the memory-bank tour."""
