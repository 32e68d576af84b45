"""The Core memory: one always-in-context text block with a hard character limit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CORE_LIMIT = 5_000  # characters (MemBuilder, protocols §1)
COMPRESS_TARGET = 3_000  # what a compression call is asked to reach
APPEND_ADVISORY = 0.9  # APPEND is meant for a block under 90% full

# (text, target_chars) -> compressed text; typically one call to a language model.
Compressor = Callable[[str, int], str]


@dataclass
class CoreEvent:
    """Something the block did beyond a plain edit: compression, truncation, a no-op REPLACE."""

    kind: str  # "compressed" | "truncated" | "compress_failed" | "replace_missing" | "append_over_advisory"
    detail: str
    chars_before: int
    chars_after: int

    def to_dict(self) -> dict[str, Any]:
        return dict(kind=self.kind, detail=self.detail, chars_before=self.chars_before, chars_after=self.chars_after)


@dataclass
class CoreBlock:
    text: str = ""
    limit: int = CORE_LIMIT
    compressor: Compressor | None = field(default=None, repr=False, compare=False)
    compress_target: int = COMPRESS_TARGET
    events: list[CoreEvent] = field(default_factory=list, compare=False)

    @property
    def usage(self) -> float:
        """Share of the limit in use, in percent."""
        return 100.0 * len(self.text) / self.limit

    def append(self, content: str) -> list[CoreEvent]:
        new = []
        if len(self.text) >= APPEND_ADVISORY * self.limit:
            new.append(self._event("append_over_advisory", f"block {self.usage:.0f}% full", len(self.text), len(self.text)))
        self.text = f"{self.text}\n{content}" if self.text else content
        return new + self._enforce_limit()

    def replace(self, old_text: str, new_text: str) -> list[CoreEvent]:
        if not old_text or old_text not in self.text:
            return [self._event("replace_missing", f"text to replace not found: {old_text[:60]!r}", len(self.text), len(self.text))]
        # Only the first occurrence: the model names one passage, not a pattern.
        self.text = self.text.replace(old_text, new_text, 1)
        return self._enforce_limit()

    def rewrite(self, content: str) -> list[CoreEvent]:
        self.text = content
        return self._enforce_limit()

    def _enforce_limit(self) -> list[CoreEvent]:
        if len(self.text) <= self.limit:
            return []
        new = []
        before = len(self.text)
        if self.compressor is not None:
            try:
                squeezed = self.compressor(self.text, self.compress_target)
            except Exception as exc:  # a failing model call must not lose the block
                new.append(self._event("compress_failed", f"{type(exc).__name__}: {exc}"[:200], before, before))
            else:
                if isinstance(squeezed, str) and squeezed.strip():
                    self.text = squeezed
                    new.append(self._event("compressed", f"target {self.compress_target}", before, len(self.text)))
                else:
                    new.append(self._event("compress_failed", "compressor returned no text", before, before))
        if len(self.text) > self.limit:
            cut_from = len(self.text)
            self.text = self.text[: self.limit]
            new.append(self._event("truncated", f"cut at {self.limit} characters", cut_from, self.limit))
        return new

    def _event(self, kind: str, detail: str, before: int, after: int) -> CoreEvent:
        ev = CoreEvent(kind, detail, before, after)
        self.events.append(ev)
        return ev

    def copy(self) -> CoreBlock:
        return CoreBlock(self.text, self.limit, self.compressor, self.compress_target, list(self.events))
