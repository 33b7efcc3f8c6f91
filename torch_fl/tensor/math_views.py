"""Lazy conjugate and negative views of ral tensors (`x.conj()`, `x.conj().imag`).

PyTorch marks such a view with a bit on the tensor (`is_conj()`, `is_neg()`) instead of
computing it: the view shares its base's memory, writes through it reach the base (stored
conjugated or negated) and later changes of the base show in it. A RalMathView is a
RalTensor carrying those bits. Its own class keeps it off every fast path that asks
`type(t) is RalTensor` (the positional dispatch cache, the shortcuts, `ral_mode`'s pass
through), so that each op on it reaches dispatch/math_bits.py, which resolves the bits as
PyTorch's Conjugate and Negative fallbacks do. Those fallbacks run before
`__torch_dispatch__` for every op but views, copies, clones and the BLAS family, which
receive the bits (aten's MathBitFallThroughLists.h).
"""

from __future__ import annotations

import torch

from torch_fl.tensor.ral_tensor import RalMathView, RalTensor, torch_device, wrap

_make = torch.Tensor._make_wrapper_subclass
_set_conj = torch._C._set_conj
_set_neg = torch._C._set_neg
_STRIDED = torch.strided


__all__ = ["RalMathView", "bits_of", "meta_twin", "plain", "with_bits"]


def plain(t: RalTensor) -> RalTensor:
    """A bit-free RalTensor over t's memory with t's geometry: its stored values."""
    return wrap(t._buf, t.shape, t.stride(), t.storage_offset(), t.dtype)


def with_bits(t: RalTensor, conj: bool, neg: bool) -> RalTensor:
    """A view of t's memory with t's geometry and the given bits (a plain RalTensor if none)."""
    if not (conj or neg):
        return plain(t)
    out = _make(RalMathView, t.shape, t.stride(), t.storage_offset(), None, t.dtype, _STRIDED, torch_device(t._dev))
    out._buf = t._buf
    out._dev = t._dev
    if conj:
        _set_conj(out, True)
    if neg:
        _set_neg(out, True)
    return out


def bits_of(t: torch.Tensor) -> tuple[bool, bool]:
    """(is_conj, is_neg) of any tensor."""
    return t.is_conj(), t.is_neg()


def meta_twin(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with t's geometry and bits: ATen's view checks and bit rules run on it."""
    m = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    if t.is_conj():
        _set_conj(m, True)
    if t.is_neg():
        _set_neg(m, True)
    return m
