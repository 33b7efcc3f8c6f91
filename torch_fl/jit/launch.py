"""Pack a generated kernel's call (tensor descriptors, tagged scalars) and launch it."""

from __future__ import annotations

import struct

import torch

from .._native import ffi, lib
from ..dtypes import CODE_OF_TORCH
from ..memory import allocate
from ..packing import TAG_FLOAT, TAG_INT
from ..runtime import raise_status
from ..streams_state import current
from ..tensor import wrap
from ..transfer import contiguous_strides


def empty(dev: int, shape, dtype: torch.dtype):
    """A fresh contiguous RalTensor on the current stream (a generated kernel's output)."""
    n = 1
    for s in shape:
        n *= s
    return wrap(allocate(dev, n * dtype.itemsize, current(dev)), shape, contiguous_strides(shape), 0, dtype)


def expand_strides(t, out_shape) -> list[int]:
    """t's strides viewed at out_shape (0 where t broadcasts)."""
    shape, st = t.shape, t.stride()
    r, k = len(out_shape), len(shape)
    out = []
    for j in range(r):
        src = j - (r - k)
        out.append(0 if src < 0 or (shape[src] == 1 and out_shape[j] != 1) else st[src])
    return out


def scalar_words(value, dt: torch.dtype, tag: str, lang: str):
    """(ABI tag, packed word or float) for a run-time scalar of a generated kernel."""
    if tag == "f":
        if lang == "opencl-c" and dt == torch.float64:  # no double args on that path: bits in a long
            return TAG_INT, struct.unpack("<q", struct.pack("<d", float(value)))[0]
        return TAG_FLOAT, float(value)
    return TAG_INT, int(value)


def pack(tensors, scalars) -> tuple[list, list]:
    """The packed call: tensors are (tensor, shape, strides), outputs first; scalars (ABI tag, value)."""
    packed = [0, 0, len(scalars)]
    floats = []
    for t, shape, strides in tensors:
        packed += [
            t._buf.ptr,
            t.storage_offset() * t.dtype.itemsize,
            CODE_OF_TORCH[t.dtype],
            len(shape),
            *shape,
            *strides,
        ]
    for tag, v in scalars:
        if tag == TAG_FLOAT:
            packed += [TAG_FLOAT, len(floats)]
            floats.append(v)
        else:
            packed += [tag, v]
    return packed, floats


def fire(dev: int, handle: int, packed: list, floats: list, op_name_c, plugin: str, op: str) -> None:
    """rt_launch on the current stream; raise the runtime's error on failure."""
    status = lib.rt_launch(
        dev,
        current(dev),
        handle,
        ffi.new("int64_t[]", packed),
        len(packed),
        ffi.new("double[]", floats) if floats else ffi.NULL,
        ffi.NULL,
        op_name_c,
    )
    if status:
        raise_status(status, plugin=plugin, op=op)


def call(dev, handle, n_out, tensors, scalars, op_name_c, plugin, op) -> None:
    """Pack and launch: n_out outputs first in `tensors`."""
    packed, floats = pack(tensors, scalars)
    packed[0] = n_out
    packed[1] = len(tensors) - n_out
    fire(dev, handle, packed, floats, op_name_c, plugin, op)
