"""A text space that holds any string.

Gymnasium's ``spaces.Text`` admits letters and digits only by default, so dialogue and JSON
would fail ``contains``. Model output can be anything; so can the text this space samples.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from gymnasium import spaces

_SAMPLE_CHARS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 {}[]\":,.!?'-_\n") + ["é", "ß", "日", "🙂"]


class FreeText(spaces.Space[str]):
    """Any ``str`` up to ``max_length`` characters (``None``: unbounded)."""

    def __init__(self, max_length: int | None = None, seed: int | np.random.Generator | None = None):
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(0, 200 if self.max_length is None else min(200, self.max_length) + 1))
        if self.np_random.random() < 0.3:  # sometimes well-formed JSON, the interesting case for agents
            text = json.dumps({"operations": [{"action": "ADD", "memory": "".join(self.np_random.choice(_SAMPLE_CHARS, n))}]})
            return text if self.max_length is None else text[: self.max_length]
        return "".join(self.np_random.choice(_SAMPLE_CHARS, n))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and (self.max_length is None or len(x) <= self.max_length)

    def __repr__(self) -> str:
        return f"FreeText(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, FreeText) and other.max_length == self.max_length
