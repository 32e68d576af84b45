"""``make_peer``: a peer system for ``memgym eval`` from its configuration. The peers' packages
(mem0, agentic_memory) load only when a peer is built, so ``memgym eval`` works without them."""

from __future__ import annotations

from typing import Any

from membuilder.agents.mem0_store import import_mem0
from membuilder.agents.peer_endpoint import model_endpoint
from memgym_env.benchmarks.a_mem_system import AMemSystem, import_a_mem
from memgym_env.benchmarks.mem0_system import Mem0System


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
            import_a_mem()
        else:
            import_mem0()
    except ImportError as exc:
        raise ValueError(f"--system {system}: {exc}") from exc


def make_peer(cfg, models: dict[str, Any]):
    _check_installed(cfg.system)
    path, dim = _embedder_path(cfg, models)
    endpoint = server = None
    if cfg.system in ("mem0-infer", "a-mem"):
        endpoint, server = model_endpoint(models["model"], cfg.construct_max_tokens, cfg.serve_context_length)
    if cfg.system in ("mem0", "mem0-infer"):
        return Mem0System(path, k=cfg.answer_k, infer=cfg.system == "mem0-infer", endpoint=endpoint,
                          window=cfg.peer_window, dim=dim, server=server)
    return AMemSystem(path, k=cfg.answer_k, endpoint=endpoint, window=cfg.peer_window or 1, server=server)
