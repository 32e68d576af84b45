"""Published memory systems run as they ship (Mem0, A-Mem), each behind a small adapter that
meters its model and embedding calls. Their packages are the optional ``memgym[peers]`` extra
and are imported only when a peer is used, so a default install never needs them."""
