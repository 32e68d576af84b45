"""Published memory systems as ``memgym eval`` systems (``mem0``, ``mem0-infer``, ``a-mem``).

Each adapter loads its package (mem0, agentic_memory) only when its system is asked for, so
``memgym eval`` works without the optional ``memgym[peers]`` packages installed.
"""

PEER_SYSTEMS = ("mem0", "mem0-infer", "a-mem")
INFERRING_PEERS = ("mem0-infer", "a-mem")  # peers whose writes call a model (the --model spec)
