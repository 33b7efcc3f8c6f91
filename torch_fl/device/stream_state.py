"""The current stream id of each device: read on every op, so kept as a plain list."""

from __future__ import annotations

# CURRENT[dev] is the runtime stream id ops on ral:dev are issued to (0 = default stream).
# Process-wide rather than per-thread: a per-thread lookup would sit on the per-op hot path.
CURRENT: list[int] = []


def current(dev: int) -> int:
    """Current stream id of a device."""
    try:
        return CURRENT[dev]
    except IndexError:
        CURRENT.extend([0] * (dev + 1 - len(CURRENT)))
        return 0
