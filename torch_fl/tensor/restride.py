"""Change a RalTensor's sizes/strides/offset (and buffer) in place.

Wrapper subclasses have no Python setter for their metadata. PyTorch's Meta kernel for
`set_.source_Storage_storage_offset` only rewrites TensorImpl metadata, so redispatching it
(below the Python key) with a placeholder storage of the buffer's size updates the wrapper;
the payload Buffer is then swapped on the Python object. This is what makes resize_, set_,
as_strided_ and the in-place view ops (t_, squeeze_, ...) work on ral tensors.
"""

from __future__ import annotations

import torch

from torch_fl.tensor.layout import contiguous_strides, extent_elems
from torch_fl.tensor.ral_tensor import RalTensor, torch_device
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


def resize(t: RalTensor, size) -> RalTensor:
    """aten::resize_: keep the data prefix, grow into a new buffer when needed."""
    size = tuple(size)
    stride = contiguous_strides(size)
    need = (t.storage_offset() + extent_elems(size, stride)) * t.dtype.itemsize
    if need <= t._buf.nbytes:
        return restride(t, t._buf, size, stride, t.storage_offset())
    grown = empty_on(t._dev, (need // t.dtype.itemsize,), t.dtype)
    old = t.numel()
    if old:
        torch.ops.aten.copy_.default(grown[:old], t.reshape(-1))
    return restride(t, grown._buf, size, stride, 0)
