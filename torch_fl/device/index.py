"""Which ral device a call means: the per-thread current device and device-argument parsing."""

from __future__ import annotations

import threading

import torch

from torch_fl.core.runtime import device_count as _device_count
from torch_fl.core.runtime import unloaded_plugins_note

_tls = threading.local()


def current_device() -> int:
    """Index of the current ral device of this thread."""
    return getattr(_tls, "device", 0)


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
    n = _device_count()
    if not 0 <= idx < n:
        raise RuntimeError(
            f"ral:{idx} does not exist: {n} ral device(s) are visible (ralctl list-devices){unloaded_plugins_note()}"
        )
    return idx


def device_index(device) -> int:
    """The ral index a device argument names; ValueError for a non-ral device."""
    idx = parse_device(device)
    if idx is None:
        raise ValueError(f"expected a ral device, got {torch.device(device)}")
    return idx


def set_device(device) -> None:
    """Make a ral device current for this thread."""
    _tls.device = device_index(device)


class device:
    """Context manager that changes the current ral device."""

    def __init__(self, dev):
        self.idx = device_index(dev)
        self.prev = None

    def __enter__(self):
        self.prev = current_device()
        _tls.device = self.idx

    def __exit__(self, *exc):
        _tls.device = self.prev
