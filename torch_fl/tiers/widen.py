"""Exact CPU computations for dtypes CUDA serves and PyTorch's CPU kernels lack.

The cpu tier runs PyTorch's CPU kernel; where that kernel has no implementation for a dtype
CUDA supports, a device user would see a NotImplementedError that a CUDA user never sees
(transformers' Mixtral counts experts with `torch.histc` on an int tensor on any non-CPU
device). Each function here computes CUDA's result exactly with CPU kernels that do exist,
and hands every other dtype to the original op unchanged.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def histc(x, bins=100, min=0, max=0):  # noqa: A002 (aten's argument names)
    """aten::histc; integer inputs as CUDA computes them (aten/src/ATen/native/cuda/SummaryOps.cu):
    limits cast to the input type, bin = (v - min) * bins // (max - min), the top edge in the
    last bin, counts in the input dtype."""
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        return aten.histc.default(x, bins, min, max)
    if bins <= 0:
        raise RuntimeError("torch.histc: bins must be > 0")
    lo, hi = int(min), int(max)
    if lo == hi and x.numel():
        lo, hi = int(x.min()), int(x.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    v = x.flatten().to(torch.int64)
    v = v[(v >= lo) & (v <= hi)]
    index = ((v - lo) * bins).div(hi - lo, rounding_mode="floor").clamp_max(bins - 1)
    return torch.bincount(index, minlength=bins).to(x.dtype)


# aten overload -> the function the cpu tier calls instead of the overload itself
WIDENED = {aten.histc.default: histc}
