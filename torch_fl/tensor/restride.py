"""Change a RalTensor's sizes/strides/offset (and buffer) in place.

Wrapper subclasses have no Python setter for their metadata. PyTorch's Meta kernel for
`set_.source_Storage_storage_offset` only rewrites TensorImpl metadata, so redispatching it
(below the Python key) with a placeholder storage of the buffer's size updates the wrapper;
the payload Buffer is then swapped on the Python object. This is what makes resize_, set_,
as_strided_ and the in-place view ops (t_, squeeze_, ...) work on ral tensors.
"""

from __future__ import annotations

import torch

from torch_fl.device.memory import storage_of
from torch_fl.tensor.layout import contiguous_strides, extent_elems
from torch_fl.tensor.ral_tensor import RalTensor, meta_like, torch_device
from torch_fl.tensor.transfer import empty_on

_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset
# the wrapper's own (placeholder) storage; RalTensor.untyped_storage() answers the buffer's
_own_storage = torch._C.TensorBase.untyped_storage


def restride(t: RalTensor, buf, size, stride, offset: int) -> RalTensor:
    """Point t at `buf` with new geometry (offset and strides in elements)."""
    placeholder = torch.Tensor._make_wrapper_subclass(
        RalTensor, (buf.nbytes,), dtype=torch.uint8, device=torch_device(buf.device)
    )
    _set_storage.redispatch(_META, t, _own_storage(placeholder), offset, list(size), list(stride))
    t._buf = buf
    t._dev = buf.device
    t._sig = None  # geometry changed: the router recomputes the signature
    return t


def adopt_storage(t: RalTensor, storage: torch.UntypedStorage) -> RalTensor:
    """Make `storage` (a ral storage owning t's block) t's own C++ storage, geometry kept, so
    C++ code that reads or shares a tensor's storage directly sees the device block."""
    _set_storage.redispatch(_META, t, storage, t.storage_offset(), list(t.shape), list(t.stride()))
    return t


def resize(t: RalTensor, size, memory_format=None) -> RalTensor:
    """aten::resize_ as on CPU and CUDA: the same sizes keep t's strides (unless a memory format
    is asked), new sizes get row-major (or `memory_format`) strides over the same storage bytes
    from the same offset, and a buffer too small grows in place, keeping its bytes, so every
    view of it sees the grown memory."""
    size, stride, need = resized_geometry(t, size, memory_format)
    if size == tuple(t.shape) and stride == t.stride():
        return t
    if need > t._buf.nbytes:
        _grow(t, need)
    return restride(t, t._buf, size, stride, t.storage_offset())


def resized_geometry(t: torch.Tensor, size, memory_format=None) -> tuple[tuple, tuple, int]:
    """(sizes, strides, bytes of storage needed from its start) that `t.resize_(size,
    memory_format=...)` gives t, by CPU's rules: the same sizes keep t's strides (unless a memory
    format is asked), new sizes are row-major from the same storage offset."""
    size = tuple(size)
    if memory_format is None and min(size, default=0) >= 0:
        # CPU's shortcut: same sizes, strides kept
        stride = tuple(t.stride()) if size == tuple(t.shape) else contiguous_strides(size)
    else:  # PyTorch's own rules (channels_last, its errors) on a meta twin
        probe = meta_like(t).resize_(size, memory_format=memory_format)
        size, stride = tuple(probe.shape), tuple(probe.stride())
    return size, stride, (t.storage_offset() + extent_elems(size, stride)) * t.dtype.itemsize


def _grow(t: RalTensor, nbytes: int) -> None:
    """Grow t's buffer to nbytes in place, keeping its bytes, as CPU's resize_bytes_cpu and
    CUDA's resize_bytes_cuda grow a storage: through the buffer's torch storage, whose resize
    (ral_allocator.cpp) copies the old bytes on the current stream and moves every view of the
    buffer to the new block."""
    try:
        storage = storage_of(t._buf)
    except RuntimeError:  # no allocator shim: copy into a fresh buffer this tensor alone uses
        storage = None
    if storage is not None:
        storage.resize_(nbytes)
        return
    grown = empty_on(t._dev, (nbytes,), torch.uint8)
    old = t._buf.nbytes
    if old:
        flat = RalTensor(t._buf, (old,), (1,), 0, torch.uint8)
        torch.ops.aten.copy_.default(grown[:old], flat)
    t._buf = grown._buf
