"""Device-to-host reads and writes of ral tensors: copies, zero-copy host views, write-back.

Works on any object with a ral tensor's attributes (`_buf`, `_dev`, shape, strides, dtype), so
the RalTensor class itself can use it without importing the upload side (transfer.py).
"""

from __future__ import annotations

import torch

from torch_fl._native import ffi, lib
from torch_fl.core.runtime import check, device_records
from torch_fl.device.stream_state import current
from torch_fl.device.sync import copy_to_host_and_wait, synchronize_stream
from torch_fl.tensor.layout import byte_range, is_dense

_MAPPABLE: dict[int, bool] = {}


def host_mappable(dev: int) -> bool:
    """Whether the host can address ral:dev memory directly (zero-copy fallback)."""
    m = _MAPPABLE.get(dev)
    if m is None:
        m = _MAPPABLE[dev] = device_records()[dev].host_mappable
    return m


def host_view(t) -> torch.Tensor | None:
    """Zero-copy CPU tensor over a host-mappable device tensor, or None if not mappable.

    The caller must have synchronized the device first.
    """
    base = _host_base(t._buf, t.dtype)
    if base is None:
        return None
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def _host_base(buf, dtype) -> torch.Tensor | None:
    """A flat CPU tensor of dtype over buf's whole host mapping (cached on the Buffer), or None."""
    hit = buf.host
    # A storage-owned buffer's block is checked on use: `untyped_storage().resize_` moves it
    # to a new block behind Python's back (ral_allocator.cpp).
    if hit is not None and (buf.storage is None or (hit[0] == buf.ptr and hit[1] == buf.nbytes)):
        base = hit[2].get(dtype)
        if base is not None:
            return base
        views = hit[2]
    else:
        if not host_mappable(buf.device):
            return None
        views = {}
        buf.host = (buf.ptr, buf.nbytes, views)
    raw = views.get(torch.uint8)
    if raw is None:
        raw = views[torch.uint8] = _raw_host_tensor(buf.device, buf.ptr, buf.nbytes)
    if dtype is torch.uint8:
        return raw
    usable = (raw.numel() // dtype.itemsize) * dtype.itemsize
    base = views[dtype] = raw[:usable].view(dtype)
    return base


# (host address, bytes) -> uint8 CPU tensor over that memory. The pool hands the same blocks
# out again (a fresh index tensor per call gets last call's block), and torch.frombuffer costs
# more than a small op. A tensor over an address is valid whenever that memory is mapped,
# which rt_host_address has just checked for a live allocation.
_RAW: dict = {}
_RAW_MAX = 1024


def _raw_host_tensor(dev: int, ptr: int, nbytes: int) -> torch.Tensor:
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    addr = host_address(dev, ptr, nbytes)
    raw = _RAW.get((addr, nbytes))
    if raw is None:
        if len(_RAW) >= _RAW_MAX:
            _RAW.clear()
        raw = _RAW[(addr, nbytes)] = torch.frombuffer(ffi.buffer(ffi.cast("char*", addr), nbytes), dtype=torch.uint8)
    return raw


def host_address(dev: int, ptr: int, nbytes: int) -> int:
    """The host address of nbytes of device memory at ptr (a host-mappable device)."""
    out = ffi.new("uint64_t*")
    check(lib.rt_host_address(dev, ptr, 0, nbytes, out))
    return out[0]


def to_cpu(t, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A new CPU tensor with the same values, laid out like t where t is dense (else row-major)."""
    out, (dev, stream) = copy_to_host_async(t)
    synchronize_stream(dev, stream, "copy to host")
    return out if dtype is None or dtype == out.dtype else out.to(dtype)


# dtype -> C pointer type an element can be read through (Python's own number types).
_ITEM_CTYPES = {
    torch.float32: "float*",
    torch.float64: "double*",
    torch.int64: "int64_t*",
    torch.int32: "int32_t*",
    torch.int16: "int16_t*",
    torch.int8: "int8_t*",
    torch.uint8: "uint8_t*",
    torch.bool: "uint8_t*",
}


def item(t):
    """t.item() (`aten::_local_scalar_dense`): the one element copied into a C cell and read
    as a Python number, without a CPU tensor (dtypes without a C type go through one)."""
    ctype = _ITEM_CTYPES.get(t.dtype)
    if ctype is None or t.numel() != 1:
        return to_cpu(t).item()  # also raises CPU's error for a tensor of != 1 elements
    dev = t._dev
    isz = t.dtype.itemsize
    cell = ffi.new("uint64_t*")  # 8 aligned bytes
    copy_to_host_and_wait(dev, current(dev), cell, t._buf.ptr, t.storage_offset() * isz, isz, "copy to host")
    v = ffi.cast(ctype, cell)[0]
    return bool(v) if t.dtype is torch.bool else v


def copy_to_host_async(t) -> tuple[torch.Tensor, tuple[int, int]]:
    """A new CPU tensor that t's values are being copied into on the current stream, and
    that (device, stream): its contents are valid only after the stream is synchronized,
    and it must stay alive until then."""
    if is_dense(t.shape, t.stride()):
        out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    else:
        t = torch.ops.aten.clone.default(t, memory_format=torch.contiguous_format)
        out = torch.empty(t.shape, dtype=t.dtype)
    stream = current(t._dev)
    start, nbytes = byte_range(t)
    if nbytes:
        check(lib.rt_copy_d2h(t._dev, stream, ffi.cast("void*", out.data_ptr()), t._buf.ptr, start, nbytes, 0))
    return out, (t._dev, stream)


def buffer_to_host(buf) -> torch.UntypedStorage:
    """A CPU copy of a whole device buffer (every view of it addresses the copy alike)."""
    out = torch.empty(buf.nbytes, dtype=torch.uint8)
    if buf.nbytes:
        dst = ffi.cast("void*", out.data_ptr())
        copy_to_host_and_wait(buf.device, current(buf.device), dst, buf.ptr, 0, buf.nbytes, "copy to host")
    return out.untyped_storage()


def cpu_copy_for_fallback(t) -> torch.Tensor:
    """A CPU tensor reading t's values: a zero-copy view when the device is host-mappable."""
    view = host_view(t)
    return view if view is not None else host_copy_of(t)


def host_copy_of(t) -> torch.Tensor:
    """A CPU copy of t with its strides and storage offset, which write_back can return."""
    # Copy the whole byte range the view spans so strides survive (needed for write-back), at
    # the view's own storage offset: as_strided_scatter and as_strided_copy address the
    # storage, not the view. The elements before it are never touched (nor, for a large
    # allocation, backed by memory).
    start, nbytes = byte_range(t)
    offset = t.storage_offset()
    flat = torch.empty(offset + nbytes // t.dtype.itemsize, dtype=t.dtype)
    if nbytes:
        dst = ffi.cast("void*", flat.data_ptr() + start)
        copy_to_host_and_wait(t._dev, current(t._dev), dst, t._buf.ptr, start, nbytes, "copy to host")
    return flat.as_strided(t.shape, t.stride(), offset)


def write_back(dst, cpu: torch.Tensor) -> None:
    """Copy a CPU tensor made by host_copy_of back into the device range it came from."""
    start, nbytes = byte_range(dst)
    if nbytes:
        base = cpu.as_strided((nbytes // dst.dtype.itemsize,), (1,), cpu.storage_offset())
        check(
            lib.rt_copy_h2d(
                dst._dev, current(dst._dev), dst._buf.ptr, start, ffi.cast("void*", base.data_ptr()), nbytes
            )
        )
