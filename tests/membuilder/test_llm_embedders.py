"""The default embedder (all-MiniLM-L6-v2 from its PyPI package) and embedder specs."""

from __future__ import annotations

import numpy as np
import pytest

from membuilder.llm.embedders import Embedder, OpenAIEmbedder, SentenceTransformerEmbedder, load_embedder

TEXTS = ["I adopted a cat named Miso last spring.", "My favourite dish is mushroom risotto.", "The meeting is at 9."]


def test_vectors_have_the_model_dimension_and_float32(embedder):
    vecs = embedder.encode(TEXTS)
    assert isinstance(embedder, Embedder)
    assert vecs.shape == (3, 384) == (len(TEXTS), embedder.dim) and vecs.dtype == np.float32


def test_vectors_are_unit_length(embedder):
    assert np.allclose(np.linalg.norm(embedder.encode(TEXTS), axis=1), 1.0, atol=1e-5)


def test_same_text_gives_the_same_vector(embedder):
    a = embedder.encode([TEXTS[0], TEXTS[1]])
    b = embedder.encode([TEXTS[0]])
    assert np.allclose(a[0], b[0], atol=1e-6)


def test_related_texts_are_closer_than_unrelated_ones(embedder):
    q, pet, food = embedder.encode(["What pet do I have?", TEXTS[0], TEXTS[1]])
    assert q @ pet > q @ food


def test_empty_input_gives_an_empty_matrix(embedder):
    assert embedder.encode([]).shape == (0, 384)


def test_specs_choose_the_backend():
    assert isinstance(load_embedder({"model": "minilm"}), SentenceTransformerEmbedder)
    remote = load_embedder("openai:text-embedding-3-small@http://127.0.0.1:9/v1", dim=1536)
    assert isinstance(remote, OpenAIEmbedder) and remote.dim == 1536
    with pytest.raises(ValueError, match="has no embedder"):
        load_embedder("vllm:/models/x")
