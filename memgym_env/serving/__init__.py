"""Serving MemoryGym-v0 over HTTP: the scoring service, its wire format, the remote client, local
replicas and the OpenEnv app."""
