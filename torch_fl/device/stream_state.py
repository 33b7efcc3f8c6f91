"""The current stream id of each device, per thread (as in CUDA): read on every op."""

from __future__ import annotations

import threading


class _PerThread(threading.local):
    """ids[dev] is the runtime stream id ops on ral:dev are issued to (0 = default stream)."""

    def __init__(self):
        self.ids: list[int] = []


# Per-thread, like torch.cuda: a process-wide current stream let one thread's
# `with torch.ral.stream(s)` send other threads' ops to s, and to a destroyed id once
# s was dropped.
_TLS = _PerThread()


def current(dev: int) -> int:
    """Current stream id of a device in this thread."""
    ids = _TLS.ids
    try:
        return ids[dev]
    except IndexError:
        ids.extend([0] * (dev + 1 - len(ids)))
        return 0


def set_current(dev: int, stream_id: int) -> None:
    """Make `stream_id` the current stream of a device in this thread."""
    current(dev)
    _TLS.ids[dev] = stream_id
