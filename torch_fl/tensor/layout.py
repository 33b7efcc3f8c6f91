"""Geometry of strided tensors: row-major strides, the element extent and byte range of a view."""

from __future__ import annotations


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
