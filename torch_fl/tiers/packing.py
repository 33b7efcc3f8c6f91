"""Encoding of a kernel call into the runtime's packed int64 format (see ral_runtime.h)."""

from __future__ import annotations

import struct

import torch

from torch_fl.core.dtype_names import ABSENT_CODE
from torch_fl.device.dtypes import CODE_OF_TORCH

TAG_NONE, TAG_INT, TAG_FLOAT, TAG_BOOL, TAG_DTYPE, TAG_INT_LIST, TAG_STRING = range(7)


class Unpackable(Exception):
    """An argument the ABI cannot carry (the router then picks another tier)."""


def pack_tensor(packed: list, t, shape=None, stride=None) -> None:
    """Append one tensor descriptor; shape/stride override the tensor's own (for expansion)."""
    if shape is None:
        shape = t.shape
        stride = t.stride()
    packed.append(t._buf.ptr)
    packed.append(t.storage_offset() * t.dtype.itemsize)
    packed.append(CODE_OF_TORCH[t.dtype])
    packed.append(len(shape))
    packed.extend(shape)
    packed.extend(stride)


def pack_absent(packed: list) -> None:
    """Append the descriptor of an absent optional tensor."""
    packed.extend((0, 0, ABSENT_CODE, 0))


def pack_scalar(v, packed: list, floats: list, strings: list) -> None:
    """Append one tagged non-tensor argument."""
    tv = type(v)
    if v is None:
        packed.append(TAG_NONE)
    elif tv is bool:
        packed.append(TAG_BOOL)
        packed.append(int(v))
    elif tv is int:
        packed.append(TAG_INT)
        packed.append(v)
    elif tv is float:
        packed.append(TAG_FLOAT)
        packed.append(len(floats))
        floats.append(v)
    elif tv is list or tv is tuple or tv is torch.Size:
        if any(type(x) is not int and type(x) is not bool for x in v):
            raise Unpackable(f"list argument {v!r}")
        packed.append(TAG_INT_LIST)
        packed.append(len(v))
        packed.extend(int(x) for x in v)  # bool[] (e.g. output_mask) travels as 0/1
    elif tv is torch.dtype:
        packed.append(TAG_DTYPE)
        packed.append(CODE_OF_TORCH[v])
    elif tv is str:
        packed.append(TAG_STRING)
        packed.append(len(strings))
        strings.append(v)
    elif tv is torch.device:
        packed.append(TAG_INT)
        packed.append(v.index or 0)
    elif tv is torch.layout or tv is torch.memory_format:
        packed.append(TAG_INT)
        packed.append(0)
    else:
        raise Unpackable(f"argument of type {tv.__name__}")


def check_packable(v) -> None:
    """Raise Unpackable if a non-tensor value cannot be carried (used once per decision)."""
    pack_scalar(v, [], [], [])


def pack_call(n_out: int, tensors, scalars, starts: list | None = None) -> tuple[list, list]:
    """A whole packed call: `tensors` are (tensor, shape, strides), the n_out outputs first;
    `scalars` are (ABI tag, value) already tagged. Returns (packed words, float pool).
    `starts`, when given, receives the word index where each tensor's descriptor and then
    each scalar begins (for a caller that patches the words later)."""
    packed = [n_out, len(tensors) - n_out, len(scalars)]
    floats: list = []
    for t, shape, strides in tensors:
        if starts is not None:
            starts.append(len(packed))
        pack_tensor(packed, t, shape, strides)
    for tag, v in scalars:
        if starts is not None:
            starts.append(len(packed))
        if tag == TAG_FLOAT:
            packed += [TAG_FLOAT, len(floats)]
            floats.append(v)
        else:
            packed += [tag, v]
    return packed, floats


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
