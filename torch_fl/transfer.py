"""Moving data between host and ral devices, and between ral devices."""

from __future__ import annotations

import torch

from ._native import ffi, lib
from .memory import allocate
from .runtime import check
from .streams_state import current
from .tensor import RalTensor, wrap


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides (in elements) of a shape."""
    strides = []
    acc = 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def extent_elems(shape, stride) -> int:
    """Number of elements from the first to one past the last element a view touches."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


# Sync observers (the tracer): callables (device, reason). Empty unless tracing.
SYNC_OBSERVERS: list = []


def synchronize(dev: int, reason: str = "stream") -> None:
    """Wait for the device's current stream; surfaces asynchronous kernel errors."""
    synchronize_stream(dev, current(dev), reason)


def synchronize_stream(dev: int, stream: int, reason: str = "stream") -> None:
    """Wait for one stream of the device; surfaces asynchronous kernel errors."""
    if SYNC_OBSERVERS:
        for obs in SYNC_OBSERVERS:
            obs(dev, reason)
    check(lib.rt_stream_synchronize(dev, stream))


def empty_on(dev: int, shape, dtype: torch.dtype) -> RalTensor:
    """An uninitialized contiguous tensor on ral:dev."""
    shape = tuple(shape)
    numel = 1
    for n in shape:
        numel *= n
    itemsize = dtype.itemsize
    buf = allocate(dev, numel * itemsize, current(dev))
    return wrap(buf, shape, contiguous_strides(shape), 0, dtype)


def host_view(t: RalTensor) -> torch.Tensor | None:
    """Zero-copy CPU tensor over a host-mappable device tensor, or None if not mappable.

    The caller must have synchronized the device first.
    """
    buf = t._buf
    base = _host_base(buf)
    if base is None:
        return None
    if t.dtype != torch.uint8:
        usable = (base.numel() // t.dtype.itemsize) * t.dtype.itemsize
        base = base[:usable].view(t.dtype)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


_HOST_BASES: dict = {}
_MAPPABLE: dict[int, bool] = {}


def host_mappable(dev: int) -> bool:
    """Whether the host can address ral:dev memory directly (zero-copy fallback)."""
    m = _MAPPABLE.get(dev)
    if m is None:
        from .runtime import device_records

        m = _MAPPABLE[dev] = device_records()[dev].host_mappable
    return m


def _host_base(buf) -> torch.Tensor | None:
    import weakref

    hit = _HOST_BASES.get(id(buf))
    if hit is not None and hit[0]() is buf:
        return hit[1]
    if not host_mappable(buf.device):
        return None
    if buf.nbytes == 0:
        base = torch.empty(0, dtype=torch.uint8)
    else:
        out = ffi.new("uint64_t*")
        check(lib.rt_host_address(buf.device, buf.ptr, 0, buf.nbytes, out))
        base = torch.frombuffer(ffi.buffer(ffi.cast("char*", out[0]), buf.nbytes), dtype=torch.uint8)
    key = id(buf)
    _HOST_BASES[key] = (weakref.ref(buf, lambda _r, k=key: _HOST_BASES.pop(k, None)), base)
    return base


def _byte_range(t: RalTensor) -> tuple[int, int]:
    itemsize = t.dtype.itemsize
    return t.storage_offset() * itemsize, extent_elems(t.shape, t.stride()) * itemsize


def to_cpu(t: RalTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A new CPU tensor with the same values (and strides-independent contiguous layout)."""
    out, (dev, stream) = copy_to_host_async(t, notify="copy to host")
    check(lib.rt_stream_synchronize(dev, stream))
    return out if dtype is None or dtype == out.dtype else out.to(dtype)


def copy_to_host_async(t: RalTensor, notify: str | None = None) -> tuple[torch.Tensor, tuple[int, int]]:
    """A new CPU tensor that t's values are being copied into on the current stream, and
    that (device, stream): its contents are valid only after the stream is synchronized,
    and it must stay alive until then. `notify` tells the sync observers (as a reason)
    before the copy is enqueued, for callers that synchronize right after."""
    if not t.is_contiguous():
        t = torch.ops.aten.clone.default(t, memory_format=torch.contiguous_format)
    out = torch.empty(t.shape, dtype=t.dtype)
    stream = current(t._dev)
    start, nbytes = _byte_range(t)
    if notify is not None and SYNC_OBSERVERS:
        for obs in SYNC_OBSERVERS:
            obs(t._dev, notify)
    if nbytes:
        check(lib.rt_copy_d2h(t._dev, stream, ffi.cast("void*", out.data_ptr()), t._buf.ptr, start, nbytes, 0))
    return out, (t._dev, stream)


def cpu_copy_for_fallback(t: RalTensor) -> torch.Tensor:
    """A CPU tensor reading t's values: a zero-copy view when the device is host-mappable."""
    view = host_view(t)
    if view is not None:
        return view
    # Copy the whole byte range the view spans so strides survive (needed for write-back).
    start, nbytes = _byte_range(t)
    itemsize = t.dtype.itemsize
    flat = torch.empty(nbytes // itemsize, dtype=t.dtype)
    if nbytes:
        check(
            lib.rt_copy_d2h(t._dev, current(t._dev), ffi.cast("void*", flat.data_ptr()), t._buf.ptr, start, nbytes, 1)
        )
    return flat.as_strided(t.shape, t.stride(), 0)


def write_back(dst: RalTensor, cpu: torch.Tensor) -> None:
    """Copy a CPU tensor made by cpu_copy_for_fallback back into the device range it came from."""
    start, nbytes = _byte_range(dst)
    if nbytes:
        base = cpu.as_strided((nbytes // dst.dtype.itemsize,), (1,), 0)
        check(
            lib.rt_copy_h2d(
                dst._dev, current(dst._dev), dst._buf.ptr, start, ffi.cast("void*", base.data_ptr()), nbytes
            )
        )


def to_device(src: torch.Tensor, dev: int, dtype: torch.dtype | None = None) -> RalTensor:
    """Upload a CPU tensor to ral:dev as a new contiguous tensor."""
    if src.device.type != "cpu":
        raise TypeError(f"torch_fl: to_device expects a CPU tensor, got one on {src.device}")
    if dtype is not None and src.dtype != dtype:
        src = src.to(dtype)
    src = src.contiguous()
    if src.is_conj() or src.is_neg():
        src = src.resolve_conj().resolve_neg()
    out = empty_on(dev, src.shape, src.dtype)
    nbytes = src.numel() * src.dtype.itemsize
    if nbytes:
        check(lib.rt_copy_h2d(dev, current(dev), out._buf.ptr, 0, ffi.cast("void*", src.data_ptr()), nbytes))
    return out


def copy_into(dst, src, non_blocking: bool = False):
    """aten::copy_ across devices: ral<-cpu, cpu<-ral and ral:a<-ral:b (cast and strides handled)."""
    dst_ral = type(dst) is RalTensor
    src_ral = type(src) is RalTensor
    if dst_ral and src_ral and dst._dev == src._dev:
        return None  # same device: the router runs the plugin's copy_ kernel
    if dst_ral and not src_ral:
        staged = to_device(src.expand(dst.shape), dst._dev, dst.dtype)
        return _device_copy(dst, staged)
    if src_ral and not dst_ral:
        dst.copy_(to_cpu(src))
        return dst
    # ral:a <- ral:b: stage contiguous bytes across devices, then cast/stride on the target.
    if not src.is_contiguous():
        src = torch.ops.aten.clone.default(src, memory_format=torch.contiguous_format)
    moved = empty_on(dst._dev, src.shape, src.dtype)
    start, nbytes = _byte_range(src)
    if nbytes:
        check(lib.rt_copy_d2d(dst._dev, moved._buf.ptr, 0, src._dev, src._buf.ptr, start, nbytes, current(dst._dev)))
    return _device_copy(dst, moved)


def _device_copy(dst: RalTensor, src: RalTensor) -> RalTensor:
    if dst.dtype == src.dtype and dst.is_contiguous() and src.is_contiguous() and dst.shape == src.shape:
        dst_start, nbytes = _byte_range(dst)
        src_start, _ = _byte_range(src)
        if nbytes:
            check(
                lib.rt_copy_d2d(
                    dst._dev, dst._buf.ptr, dst_start, src._dev, src._buf.ptr, src_start, nbytes, current(dst._dev)
                )
            )
        return dst
    return torch.ops.aten.copy_.default(dst, src)
