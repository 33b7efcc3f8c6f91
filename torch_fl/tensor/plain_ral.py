"""Plain (storage-backed, non-RalTensor) tensors on a ral device, as `torch.from_dlpack` of a
ral DLPack capsule makes them: the RalTensor that shares their memory."""

from __future__ import annotations

import torch

from torch_fl._native import lib
from torch_fl.device.guard import owns_block
from torch_fl.device.memory import StorageBuffer, buffer_of
from torch_fl.tensor.dlpack import EXPORTED
from torch_fl.tensor.ral_tensor import RalTensor, wrap


def is_plain_ral(x) -> bool:
    """Whether x is a plain torch.Tensor on a ral device (not a RalTensor)."""
    return type(x) is torch.Tensor and x.device.type == "ral"


def locate(x: torch.Tensor):
    """(Buffer, element offset of x's storage start in it) for plain ral tensor x.

    x's storage must be one torch_fl made (`t.untyped_storage()`, `torch.UntypedStorage(n,
    device="ral:N")`), or x's memory must lie in a buffer torch_fl exported in a DLPack capsule
    (the capsule's consumer holds that buffer alive) or in another live pool block (a storage
    PyTorch's C++ wrapped around it, as its storage pickler does); anything else raises
    RuntimeError."""
    dev = x.device.index
    storage = x.untyped_storage()
    if owns_block(storage):
        return buffer_of(storage), 0
    try:
        start = storage.data_ptr() if storage.nbytes() else 0
    except RuntimeError:  # PyTorch refuses a null data pointer (a legacy to_dlpack capsule's)
        start = 0
    end = start + storage.nbytes()
    for buf in list(EXPORTED):
        if buf.device == dev and start and buf.ptr <= start and end <= buf.ptr + buf.nbytes:
            if (start - buf.ptr) % x.dtype.itemsize == 0:
                return buf, (start - buf.ptr) // x.dtype.itemsize
    if start and lib.rt_check_pointer(dev, start, 0, end - start) == 0:
        # memory inside a live pool block, wrapped without ownership (PyTorch's storage
        # pickler at::from_blob's a storage to copy it): valid while its owner lives, as on CUDA
        return StorageBuffer(dev, start, end - start, storage), 0
    raise RuntimeError(
        f"torch_fl: this {x.device} tensor holds no torch_fl device buffer: it is a "
        "storage-backed PrivateUse1 tensor whose memory torch_fl did not export (as "
        "torch.from_dlpack(torch.utils.dlpack.to_dlpack(t)) makes: that legacy C function reads "
        "no ral memory), so no ral op can read it. Use torch.from_dlpack(t) or "
        "t.__dlpack__() (docs/tensors_and_serialization.md, DLPack)"
    )


def as_ral(x: torch.Tensor) -> RalTensor:
    """A RalTensor over the same device memory as plain ral tensor x, with x's geometry."""
    buf, base = locate(x)
    return wrap(buf, tuple(x.shape), tuple(x.stride()), base + x.storage_offset(), x.dtype)
