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
