"""Which ral device a call means: the per-thread current device and device-argument parsing."""

from __future__ import annotations

import torch

from torch_fl._native import lib
from torch_fl.core import runtime as _runtime
from torch_fl.core.runtime import device_count as _device_count
from torch_fl.device import fork as _fork

# current_device() -> the calling thread's current ral index. The store is the runtime's (one
# int per thread), not a Python thread-local: PyTorch's device guard reads and writes it too
# (torch.accelerator.set_device_index, the autograd engine's thread for ral:N), so both sides
# always agree. A C function: no wrapper on the per-op path.
current_device = lib.rt_current_device


def parse_device(device, default: int | None = None) -> int | None:
    """The ral index a device argument names (int, str or torch.device), None for another type.

    An absent device, or a ral device without an index, means `default` (else the current
    device). An index with no visible device raises RuntimeError.
    """
    if device is None:
        idx = default
    elif isinstance(device, int):
        idx = device
    else:
        d = device if isinstance(device, torch.device) else torch.device(device)
        if d.type not in ("ral", "privateuseone"):
            return None
        idx = d.index if d.index is not None else default
    if idx is None:
        idx = current_device()
    if _fork.in_child:
        _fork.refuse(f"ral:{idx}")
    n = _device_count()
    if not 0 <= idx < n:
        raise RuntimeError(f"ral:{idx} does not exist: {_runtime.visible_devices_summary()}")
    return idx


def device_index(device) -> int:
    """The ral index a device argument names; ValueError for a non-ral device."""
    idx = parse_device(device)
    if idx is None:
        raise ValueError(f"expected a ral device, got {torch.device(device)}")
    return idx


def set_device(device) -> None:
    """Make a ral device current for this thread (RuntimeError for one that does not exist).
    Initialises ral as torch.cuda.set_device does (torch.ral.is_initialized() is then True)."""
    idx = device_index(device)
    _runtime.ensure_initialized()
    lib.rt_set_current_device(idx)


class device:
    """Context manager that changes the current ral device."""

    def __init__(self, dev):
        self.idx = device_index(dev)
        self.prev = None

    def __enter__(self):
        self.prev = current_device()
        lib.rt_set_current_device(self.idx)

    def __exit__(self, *exc):
        lib.rt_set_current_device(self.prev)  # also when the block raised
