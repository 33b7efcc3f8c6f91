"""Uploads to ral devices and copies between ral devices (the host side is host_copy.py)."""

from __future__ import annotations

import torch

from torch_fl._native import ffi, lib
from torch_fl.core.runtime import check
from torch_fl.device.memory import allocate
from torch_fl.device.stream_state import current
from torch_fl.tensor.host_copy import to_cpu
from torch_fl.tensor.layout import byte_range, contiguous_strides, is_dense
from torch_fl.tensor.ral_tensor import RalTensor, wrap


def empty_on(dev: int, shape, dtype: torch.dtype, strides=None) -> RalTensor:
    """An uninitialized tensor on ral:dev: contiguous, or with `strides` when they lay the
    elements out densely in some dimension order (the layouts eager pointwise ops give)."""
    shape = tuple(shape)
    numel = 1
    for n in shape:
        numel *= n
    itemsize = dtype.itemsize
    buf = allocate(dev, numel * itemsize, current(dev))
    if strides is None or not is_dense(shape, strides):
        strides = contiguous_strides(shape)
    return wrap(buf, shape, tuple(strides), 0, dtype)


def to_device(src: torch.Tensor, dev: int, dtype: torch.dtype | None = None, *, keep_layout: bool = True) -> RalTensor:
    """Upload a CPU tensor to ral:dev as a new tensor, laid out like src where src is dense
    (as `.to(device)` does on CPU and CUDA; `keep_layout=False`: always row-major)."""
    if src.device.type != "cpu":
        raise TypeError(f"torch_fl: to_device expects a CPU tensor, got one on {src.device}")
    if dtype is not None and src.dtype != dtype:
        src = src.to(dtype)
    if src.is_conj() or src.is_neg():
        src = src.resolve_conj().resolve_neg()
    strides = tuple(src.stride())
    if not (keep_layout and is_dense(src.shape, strides)):
        src = src.contiguous()
        strides = None
    out = empty_on(dev, src.shape, src.dtype, strides)
    nbytes = src.numel() * src.dtype.itemsize
    if nbytes:
        # a dense layout covers numel elements from its first one: one flat copy of the bytes
        check(lib.rt_copy_h2d(dev, current(dev), out._buf.ptr, 0, ffi.cast("void*", src.data_ptr()), nbytes))
    return out


def copy_into(dst, src):
    """aten::copy_ across devices: ral<-cpu, cpu<-ral and ral:a<-ral:b (cast and strides handled)."""
    dst_ral = type(dst) is RalTensor
    src_ral = type(src) is RalTensor
    if dst_ral and src_ral and dst._dev == src._dev:
        return None  # same device: the router runs the plugin's copy_ kernel
    if dst_ral and not src_ral:
        if _same_dense_bytes(dst, src):
            # the bytes as they lie, straight into dst on its stream (no staging tensor and
            # second copy: `torch.tensor(data, device=...)` and a list index take this path)
            start, nbytes = byte_range(dst)
            if nbytes:
                check(
                    lib.rt_copy_h2d(
                        dst._dev, current(dst._dev), dst._buf.ptr, start, ffi.cast("void*", src.data_ptr()), nbytes
                    )
                )
            return dst
        staged = to_device(src.expand(dst.shape), dst._dev, dst.dtype, keep_layout=False)
        return _device_copy(dst, staged)
    if src_ral and not dst_ral:
        dst.copy_(to_cpu(src))
        return dst
    # ral:a <- ral:b: stage contiguous bytes across devices, then cast/stride on the target.
    if not src.is_contiguous():
        src = torch.ops.aten.clone.default(src, memory_format=torch.contiguous_format)
    moved = empty_on(dst._dev, src.shape, src.dtype)
    start, nbytes = byte_range(src)
    if nbytes:
        check(lib.rt_copy_d2d(dst._dev, moved._buf.ptr, 0, src._dev, src._buf.ptr, start, nbytes, current(dst._dev)))
    return _device_copy(dst, moved)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _same_dense_bytes(dst, src: torch.Tensor) -> bool:
    """Whether CPU tensor src holds dst's elements byte for byte: same dtype, shape and
    dense strides, no lazy conjugate or negation. Subclasses (an UninitializedParameter, whose
    shape raises) take the general path, where their own torch-function handling applies."""
    return (
        type(src) in _PLAIN
        and src.dtype == dst.dtype
        and src.shape == dst.shape
        and src.stride() == dst.stride()
        and is_dense(dst.shape, dst.stride())
        and not (src.is_conj() or src.is_neg())
    )


def _device_copy(dst: RalTensor, src: RalTensor) -> RalTensor:
    if dst.dtype == src.dtype and dst.is_contiguous() and src.is_contiguous() and dst.shape == src.shape:
        dst_start, nbytes = byte_range(dst)
        src_start, _ = byte_range(src)
        if nbytes:
            check(
                lib.rt_copy_d2d(
                    dst._dev, dst._buf.ptr, dst_start, src._dev, src._buf.ptr, src_start, nbytes, current(dst._dev)
                )
            )
        return dst
    return torch.ops.aten.copy_.default(dst, src)
