"""What this CPU computes natively, read once from ``/proc/cpuinfo``: which engine dtype pays here."""

from __future__ import annotations

from functools import cache


@cache
def cpu_flags() -> frozenset[str]:
    """The first CPU's ``flags`` line of ``/proc/cpuinfo`` (none where it cannot be read, e.g. off Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()
