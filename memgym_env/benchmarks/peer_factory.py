"""``make_peer``: a peer system for ``memgym eval`` from its configuration (imported lazily by
the runner, so the peers' packages are needed only when a peer is asked for)."""

from __future__ import annotations

from typing import Any


def _embedder_path(cfg, models: dict[str, Any]) -> tuple[str, int]:
    """The local sentence-transformers folder (and dimension) a peer's own embedder loads."""
    emb = models.get("embedder")
    path = getattr(emb, "path", None)
    if not path:
        raise ValueError(f"--system {cfg.system} embeds with its own sentence-transformers wrapper: --embedder must "
                         f"be a local model (minilm or a folder), not {cfg.embedder!r}")
    return path, int(emb.dim)


def _check_installed(system: str) -> None:
    """A missing peer package is a one-line error before any model is started."""
    try:
        if system == "a-mem":
            from memgym_env.benchmarks.a_mem_system import import_a_mem

            import_a_mem()
        else:
            from membuilder.agents.mem0_store import import_mem0

            import_mem0()
    except ImportError as exc:
        raise ValueError(f"--system {system}: {exc}") from exc


def make_peer(cfg, models: dict[str, Any]):
    _check_installed(cfg.system)
    path, dim = _embedder_path(cfg, models)
    endpoint = server = None
    if cfg.system in ("mem0-infer", "a-mem"):
        from membuilder.agents.peer_endpoint import model_endpoint

        endpoint, server = model_endpoint(models["model"], cfg.construct_max_tokens, cfg.serve_context_length)
    if cfg.system in ("mem0", "mem0-infer"):
        from memgym_env.benchmarks.mem0_system import Mem0System

        return Mem0System(path, k=cfg.answer_k, infer=cfg.system == "mem0-infer", endpoint=endpoint,
                          window=cfg.peer_window, dim=dim, server=server)
    from memgym_env.benchmarks.a_mem_system import AMemSystem

    return AMemSystem(path, k=cfg.answer_k, endpoint=endpoint, window=cfg.peer_window or 1, server=server)
