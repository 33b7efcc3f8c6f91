"""Factory ops registered for the PrivateUse1 key, so `device="ral:N"` works without a mode."""

from __future__ import annotations

import torch

from . import transfer
from .memory import allocate
from .streams_state import current
from .tensor import wrap

_lib = None


def _dev_index(device) -> int:
    from .device_module import current_device

    if device is None:
        return current_device()
    device = torch.device(device)
    return device.index if device.index is not None else current_device()


def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """aten::empty.memory_format on ral."""
    return transfer.empty_on(_dev_index(device), size, dtype or torch.get_default_dtype())


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    """aten::empty_strided on ral: the allocation spans every element the strides reach."""
    dev = _dev_index(device)
    dtype = dtype or torch.get_default_dtype()
    nbytes = transfer.extent_elems(size, stride) * dtype.itemsize
    return wrap(allocate(dev, nbytes, current(dev)), tuple(size), tuple(stride), 0, dtype)


def arange_start_step(start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    """aten::arange.start_step on ral: computed on the host (tiny) and uploaded once."""
    cpu = torch.arange(start, end, step, dtype=dtype)
    return transfer.to_device(cpu, _dev_index(device))


def linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    """aten::linspace on ral (host compute, one upload)."""
    return transfer.to_device(torch.linspace(start, end, steps, dtype=dtype), _dev_index(device))


def register() -> None:
    """Register the factory kernels once per process."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("empty.memory_format", empty_memory_format, "PrivateUse1")
    _lib.impl("empty_strided", empty_strided, "PrivateUse1")
    _lib.impl("arange.start_step", arange_start_step, "PrivateUse1")
    _lib.impl("linspace", linspace, "PrivateUse1")
