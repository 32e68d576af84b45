"""A small exact vector index over texts (RAG chunks, AWE notes): cosine similarity, top-k.

Assistant memories hold hundreds of texts at most, so a dense matrix product is exact and
faster than building an ANN index. Only texts are saved; vectors are recomputed on load.
"""

from __future__ import annotations

import numpy as np


class TextIndex:
    def __init__(self, embedder):
        self.embedder = embedder
        self.texts: list[str] = []
        self.vectors = np.zeros((0, int(embedder.dim)), dtype=np.float32)

    def __len__(self) -> int:
        return len(self.texts)

    def add(self, texts: list[str]) -> None:
        texts = [t for t in texts if t.strip()]
        if not texts:
            return
        self.vectors = np.vstack([self.vectors, self.embedder.encode(texts)])
        self.texts += texts

    def replace(self, i: int, text: str) -> None:
        """Text ``i`` becomes ``text`` (and its vector with it)."""
        self.texts[i] = text
        self.vectors[i] = self.embedder.encode([text])[0]

    def remove(self, positions: list[int]) -> None:
        """Drop the texts at ``positions``; the others keep their order."""
        drop = set(positions)
        keep = [i for i in range(len(self.texts)) if i not in drop]
        self.texts = [self.texts[i] for i in keep]
        self.vectors = self.vectors[keep]

    def search(self, query: str, k: int) -> list[int]:
        """Indices of the ``k`` most similar texts, best first (ties: older first)."""
        if not self.texts or k < 1:
            return []
        scores = self.vectors @ self.embedder.encode([query or " "])[0]
        order = np.argsort(-scores, kind="stable")
        return [int(i) for i in order[:k]]
