"""User selections written as ranges, ``"8-15"`` or ``"0,2,5-7"``: how the trainer's configs, policy cards,
``memgym serve-env --users`` and the demo name a world's users by index."""

from __future__ import annotations


def parse_users(spec: str | int, what: str = "users") -> list[int]:
    """The user indices ``spec`` names, in its order; ``what`` names the setting in the error a malformed
    spec gets (a reversed range such as ``"8-3"`` is one: it would silently select nobody)."""
    users: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if dash else lo)
        except ValueError:
            raise ValueError(f"{what} {spec!r}: expected numbers and ranges such as '8-15' or '0,2,5-7'") from None
        if last < first:
            raise ValueError(f"{what} {spec!r}: the range {part!r} runs backwards")
        users += range(first, last + 1)
    return users
