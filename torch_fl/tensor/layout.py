"""Geometry of strided tensors: row-major strides, the element extent and byte range of a view."""

from __future__ import annotations

import torch


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides (in elements) of a shape."""
    strides = []
    acc = 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def is_dense(shape, stride) -> bool:
    """Whether a strided layout covers exactly numel elements with no overlap: a permutation of
    row-major order (size-1 dims may carry any stride)."""
    dims = sorted((st, n) for n, st in zip(shape, stride) if n != 1)
    expected = 1
    for st, n in dims:
        if st != expected:
            return False
        expected *= n
    return True


def extent_elems(shape, stride) -> int:
    """Number of elements from the first to one past the last element a view touches."""
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def byte_range(t) -> tuple[int, int]:
    """(first byte, number of bytes) of the buffer range a ral tensor's view spans."""
    itemsize = t.dtype.itemsize
    return t.storage_offset() * itemsize, extent_elems(t.shape, t.stride()) * itemsize


def significant_strides(t) -> tuple[int, ...]:
    """t's strides without those of size-1 dims (which address nothing): equal for two tensors
    of one shape exactly when they lay their elements out the same way."""
    return tuple(st for n, st in zip(t.shape, t.stride()) if n != 1)


def permuted_dense_strides(t) -> tuple[int, ...] | None:
    """t's strides where they lay it out densely in another order than row-major, else None.
    Strides differing only in size-1 dims count as row-major, which the contiguous signature of
    the launch caches stands for."""
    if t.numel() <= 1 or t.is_contiguous():
        return None
    stride = tuple(t.stride())
    return stride if is_dense(t.shape, stride) else None


def strides_like(src, memory_format=None, op=None) -> tuple[int, ...] | None:
    """The strides PyTorch gives a new tensor made from `src` in `memory_format` (None: row-major).

    preserve_format (the default) keeps a dense src's layout, as `.to()`, `clone` and `empty_like`
    do on CPU and CUDA; any other case asks the meta kernel of `op` (default `empty_like`, whose
    rules for non-dense inputs differ from `_to_copy`'s), so the answer is PyTorch's own."""
    if memory_format is None or memory_format is torch.preserve_format:
        if src.is_contiguous():
            return None
        stride = tuple(src.stride())
        if is_dense(src.shape, stride):
            return stride
    elif memory_format is torch.contiguous_format:
        return None
    meta = torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device="meta")
    return tuple((op or torch.ops.aten.empty_like.default)(meta, memory_format=memory_format).stride())


def strides_in_format(shape, memory_format) -> tuple[int, ...] | None:
    """The strides of a new tensor of `shape` in `memory_format` (None: row-major); PyTorch's own
    rules, including its error for a format the rank cannot take."""
    if memory_format is None or memory_format is torch.contiguous_format:
        return None
    return tuple(torch.empty(shape, device="meta", memory_format=memory_format).stride())


def elementwise_strides(shape, operands) -> tuple[int, ...] | None:
    """The strides CPU and CUDA give the fresh output of an elementwise op (TensorIterator's
    `reorder_dimensions`), or None for row-major. `operands`: (shape, strides) of each tensor
    input in argument order, broadcast to `shape`. Meta kernels written in Python can order
    dims differently (a 0-dim or broadcast operand beside a transposed one), so the jit tier
    asks this instead of them."""
    nd = len(shape)
    if nd <= 1:
        return None
    strides = []
    for osh, ost in operands:
        off = nd - len(osh)
        st = [0] * nd
        for i, (n, s) in enumerate(zip(osh, ost)):
            st[off + i] = 0 if n == 1 and shape[off + i] != 1 else s
        strides.append(st)

    def should_swap(d0, d1):
        for st in strides:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue  # a broadcast dim says nothing about this operand's order
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1  # equal strides: the smaller dim goes inner
        return 0

    perm = list(range(nd - 1, -1, -1))  # innermost dim first
    for i in range(1, nd):  # TensorIterator's insertion sort, which stops at a "keep" verdict
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    if perm == list(range(nd - 1, -1, -1)):
        return None
    out = [0] * nd
    step = 1
    for d in perm:
        out[d] = step
        step *= shape[d]
    return tuple(out)
