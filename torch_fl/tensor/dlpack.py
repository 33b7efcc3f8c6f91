"""DLPack for ral tensors: the device they name, and the capsules they export.

PyTorch maps PrivateUse1 to `kDLExtDev`, so a ral tensor's `__dlpack_device__()` is
`(kDLExtDev, index)`. A device capsule (the consumer asks for no device, or for this one) points
at the device buffer through its torch storage: `torch.from_dlpack` builds a storage-backed
PrivateUse1 tensor over the same memory, whose ops torch_fl runs (tensor/dlpack_import.py).
A consumer that asks for a host capsule (`dl_device=(kDLCPU, 0)`, e.g.
`np.from_dlpack(t, device="cpu")`) gets one: zero-copy over the device memory where the device is
host-mappable, else a copy.
"""

from __future__ import annotations

import ctypes
import weakref

import torch
from torch.utils.dlpack import DLDeviceType

from torch_fl._native import ffi, lib
from torch_fl.core.runtime import check
from torch_fl.device.memory import storage_of
from torch_fl.device.stream_state import current
from torch_fl.device.sync import synchronize_stream
from torch_fl.tensor.host_copy import host_mappable, to_cpu


def dlpack_device(t) -> tuple[DLDeviceType, int]:
    """`t.__dlpack_device__()`: PyTorch's DLPack device type for PrivateUse1, and t's index."""
    return (DLDeviceType.kDLExtDev, t._dev)


def export(t, *, stream=-1, max_version=None, dl_device=None, copy=None):
    """`t.__dlpack__(...)`: a host capsule when the consumer asks for one, else BufferError."""
    # torch.Tensor.__dlpack__'s own refusals, with its messages
    if t.requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    if t.is_conj():
        raise BufferError("Can't export tensors with the conjugate bit set")
    if stream is not None and type(stream) is not int:
        raise TypeError("stream must be ``int`` or ``none``")
    dev = t._dev
    if dl_device is None or int(dl_device[0]) == DLDeviceType.kDLExtDev:
        if dl_device is not None and int(dl_device[1]) != dev:
            raise BufferError(f"ral:{dev} tensor: a DLPack capsule on ral:{int(dl_device[1])} needs a device copy")
        return _device_capsule(t.clone() if copy else t, max_version)
    if int(dl_device[0]) != DLDeviceType.kDLCPU:
        raise BufferError(f"ral:{dev} tensors export DLPack capsules on ral:{dev} or the CPU, not {tuple(dl_device)}")
    if int(dl_device[1]) != 0:
        raise BufferError(f"DLPack: no CPU device {int(dl_device[1])} (only 0)")
    if copy is True or not host_mappable(dev):
        if copy is False:
            raise BufferError(
                f"ral:{dev} memory is not host-mappable: a CPU DLPack capsule of it needs a copy, "
                "and copy=False was given"
            )
        cpu = to_cpu(t.detach())
    else:
        synchronize_stream(dev, current(dev), "DLPack export")  # host reads must see every write
        cpu = _host_view_keeping(t)
    if max_version is None or max_version[0] < 1:
        return torch._C._to_dlpack(cpu)
    return torch._C._to_dlpack_versioned(cpu)


_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset

# Buffers exported in device capsules (weakly): how an imported tensor finds its Buffer again
# (tensor/dlpack_import.py). The capsule holds the exported wrapper, which holds the Buffer.
EXPORTED: weakref.WeakSet = weakref.WeakSet()
# Run once, before the first device capsule leaves: the PrivateUse1 fallback that runs ops on
# imports (dlpack_import.register, added by api.py). Registered then, not at import: a global
# fallback changes how PyTorch treats every PrivateUse1 op without a kernel (fake tensors of
# nn.GRUCell under torch.compile fail an internal assert with it), and a process that never
# exports a device capsule can never hold an import.
BEFORE_FIRST_EXPORT: list = []


def _device_capsule(t, max_version):
    """A kDLExtDev capsule over t's device memory (after t's stream's queued work)."""
    while BEFORE_FIRST_EXPORT:
        BEFORE_FIRST_EXPORT.pop()()
    dev = t._dev
    synchronize_stream(dev, current(dev), "DLPack export")  # the consumer may use any stream
    alias = t.detach()  # a wrapper of t's own geometry, whose TensorImpl gets the real storage
    # PyTorch's exporter reads the TensorImpl's storage, which a wrapper subclass leaves empty:
    # give it the buffer's storage (the Meta kernel of set_ only rewrites TensorImpl fields)
    _set_storage.redispatch(
        _META, alias, storage_of(alias._buf), alias.storage_offset(), list(alias.shape), list(alias.stride())
    )
    EXPORTED.add(alias._buf)
    if max_version is None or max_version[0] < 1:
        return torch._C._to_dlpack(alias)
    return torch._C._to_dlpack_versioned(alias)


def _host_view_keeping(t) -> torch.Tensor:
    """A zero-copy CPU view of a host-mappable ral tensor whose storage keeps t's device buffer
    alive (the capsule's consumer may outlive every ral tensor on that buffer)."""
    buf = t._buf
    if buf.nbytes == 0:
        base = torch.empty(0, dtype=torch.uint8)
    else:
        out = ffi.new("uint64_t*")
        check(lib.rt_host_address(buf.device, buf.ptr, 0, buf.nbytes, out))
        cells = (ctypes.c_char * buf.nbytes).from_address(out[0])
        cells.keep = buf  # torch.frombuffer holds `cells` for the storage's lifetime
        base = torch.frombuffer(cells, dtype=torch.uint8)
    if t.dtype != torch.uint8:
        usable = (base.numel() // t.dtype.itemsize) * t.dtype.itemsize
        base = base[:usable].view(t.dtype)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())
