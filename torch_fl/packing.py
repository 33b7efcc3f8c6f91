"""Encoding of a kernel call into the runtime's packed int64 format (see ral_runtime.h)."""

from __future__ import annotations

import torch

from .dtypes import ABSENT_CODE, CODE_OF_TORCH

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
