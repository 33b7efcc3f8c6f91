"""The current stream id of each device, per thread (as in CUDA): read on every op.

The state lives in the native runtime (rt_current_stream), not in a Python thread-local,
because PyTorch switches it too: the C++ device guard forwards getStream/exchangeStream
there, so the autograd engine runs each backward op on its forward op's stream, and
`torch.accelerator.set_stream` / `with torch.Stream` reach torch_fl's ops. Reading it is
one C call, as cheap as the thread-local lookup it replaced.
"""

from __future__ import annotations

from torch_fl._native import lib
from torch_fl.core.runtime import check

# Per-thread, like torch.cuda: a process-wide current stream let one thread's
# `with torch.ral.stream(s)` send other threads' ops to s, and to a destroyed id once
# s was dropped.
# current(dev) -> the calling thread's current stream id of ral:dev (a C function: no wrapper
# on the per-op path)
current = lib.rt_current_stream


def set_current(dev: int, stream_id: int) -> None:
    """Make `stream_id` the current stream of a device in this thread."""
    check(lib.rt_set_current_stream(dev, stream_id))
