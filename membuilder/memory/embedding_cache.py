"""A text -> vector cache in front of an embedder, shared by a bank and all its forks."""

from __future__ import annotations

import hashlib

import numpy as np

from membuilder.llm.embedders import Embedder


def text_key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class EmbeddingCache:
    """Embeds each distinct text once.

    G forks of one snapshot often write the same sentence; the cache makes the second and later
    writes free. ``put`` lets callers (benchmarks, loaders) supply vectors computed elsewhere.
    """

    def __init__(self, embedder: Embedder | None = None, dim: int | None = None):
        if embedder is None and dim is None:
            raise ValueError("EmbeddingCache needs an embedder or, for pre-computed vectors only, a dim")
        self.embedder = embedder
        self.dim = int(embedder.dim if embedder is not None else dim)
        self._vectors: dict[str, np.ndarray] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._vectors)

    def put(self, texts: list[str], vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(f"expected vectors of shape ({len(texts)}, {self.dim}), got {vectors.shape}")
        window = getattr(self.embedder, "max_chars", None)
        for text, vec in zip(texts, vectors):
            text = text[:window] if window else text
            self._vectors[text_key(text)] = vec

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors for ``texts`` in order; the missing ones are encoded in a single batch."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        window = getattr(self.embedder, "max_chars", None)
        if window:
            texts = [t[:window] for t in texts]
        keys = [text_key(t) for t in texts]
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts):
            if key not in self._vectors:
                missing.setdefault(key, text)
        if missing:
            if self.embedder is None:
                raise KeyError(f"{len(missing)} text(s) have no pre-computed vector and no embedder is set")
            vecs = self.embedder.encode(list(missing.values()))
            for key, vec in zip(missing, vecs):
                self._vectors[key] = np.asarray(vec, dtype=np.float32)
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        for i, key in enumerate(keys):
            out[i] = self._vectors[key]
        return out
