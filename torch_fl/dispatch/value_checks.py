"""The per-call check PyTorch makes when a Scalar argument becomes an element of the tensor's
dtype (`fill_`, `masked_fill`, and through them `full`, `full_like`, `new_full`, `t[:] = v`,
`t[mask] = v`) or of the result dtype (clamp's bounds).

ATen converts such a value with `c10::checked_convert`, which refuses one the dtype cannot
hold ("value cannot be converted to type uint8_t without overflow"); ral kernels received the
raw number and wrapped it, so `torch.zeros(3, dtype=torch.uint8, device="ral:0").fill_(300)`
gave 44 where CPU raises. The value is not part of a cached decision, so the check runs on
every call (a few comparisons, only for these ops). The rule is c10's `overflows<To, From>`
(c10/util/TypeCast.h): bool targets take anything; floats to floating dtypes may be inf or
NaN but no larger than the dtype's max; an integer to an unsigned dtype may be negative down
to -max (two's complement wrap); a complex value needs a zero imaginary part unless the dtype
is complex.
"""

from __future__ import annotations

import math

import torch

from torch_fl.device.dtypes import CPP_TYPE_NAME
from torch_fl.tiers.vendor import common_dtype

# op -> position of the Scalar that becomes an element of argument 0's dtype
_VALUE_AT = {
    "aten::fill_.Scalar": 1,
    "aten::fill.Scalar": 1,
    "aten::masked_fill_.Scalar": 2,
    "aten::masked_fill.Scalar": 2,
}
_LIMITS: dict = {}  # dtype -> (lowest, max, is_floating, is_unsigned)


def _limits(dtype):
    lim = _LIMITS.get(dtype)
    if lim is None:
        info = torch.finfo(dtype) if dtype.is_floating_point or dtype.is_complex else torch.iinfo(dtype)
        floating = dtype.is_floating_point or dtype.is_complex
        lim = _LIMITS[dtype] = (info.min, info.max, floating, not floating and info.min == 0)
    return lim


def _real_overflows(v, dtype) -> bool:
    """c10::overflows<dtype, type(v)> for a real (int or float) Python value."""
    lowest, top, floating, unsigned = _limits(dtype)
    if type(v) is float:
        if math.isinf(v) or math.isnan(v):
            return not floating
        return v < lowest or v > top
    if unsigned:
        return v > top or (v < 0 and -v > top)
    return v < lowest or v > top


def overflows(v, dtype) -> bool:
    """Whether ATen refuses Python number v as an element of dtype."""
    if dtype is torch.bool or type(v) is bool:
        return False
    if type(v) is complex:
        if dtype.is_complex:
            return _real_overflows(v.real, dtype) or _real_overflows(v.imag, dtype)
        return v.imag != 0 or _real_overflows(v.real, dtype)
    return _real_overflows(v, dtype)


def _refuse_overflow(v, dtype) -> None:
    """Raise CPU's RuntimeError when ATen cannot take Python number v as an element of dtype."""
    if overflows(v, dtype):
        raise RuntimeError(f"value cannot be converted to type {CPP_TYPE_NAME[dtype]} without overflow")


def _check_value(pos: int):
    def check(sch, full) -> None:
        v, t = full[pos], full[0]
        if type(v) not in (int, float, complex):
            return
        if t.dtype is torch.bool:
            # c10 makes a bool of any number as `v != 0` (NaN, -0.5 and 2**40 are True); a
            # kernel handed the raw number truncated it (masked_fill gave False). `full` is
            # this call's own argument list: the kernel reads the canonical value from it.
            full[pos] = v != 0
        else:
            _refuse_overflow(v, t.dtype)

    return check


# (tensor dtype, bound types..., default dtype) -> the dtype clamp converts its bounds to
_BOUNDS_DTYPE: dict = {}


def _bounds_dtype(t, bounds):
    """The dtype clamp converts its bounds to: ATen's result type of t and every bound together
    (uint8 with min=300 and max=1.5 computes in float, where 300 fits). It depends on the
    bounds' types only, so each combination is promoted once."""
    key = (t.dtype, *map(type, bounds), torch.get_default_dtype())
    dtype = _BOUNDS_DTYPE.get(key)
    if dtype is None:
        dtype = _BOUNDS_DTYPE[key] = common_dtype([t, *bounds])
    return dtype


def _check_bounds(*positions: int):
    # clamp's bounds become elements of the result dtype (an integer tensor with a float
    # bound computes in float): uint8 `clamp(max=300)` is refused with CPU's message, where
    # the kernels raised their own error, and float16 `clamp(max=1e6)` ran.
    def check(sch, full) -> None:
        t = full[0]
        bounds = [full[p] for p in positions if type(full[p]) in (int, float, complex, bool)]
        if not bounds:
            return
        dtype = _bounds_dtype(t, bounds)
        if sch.is_inplace and dtype != t.dtype:
            return  # CPU refuses the cast first ("result type Float can't be cast ..."): the router's tiers do
        for v in bounds:
            _refuse_overflow(v, dtype)

    return check


def _check_integer_divisor(sch, full) -> None:
    # ATen's integer remainder raises on a zero divisor; the OpenCL kernel returned 0 (a silent
    # wrong value). A Scalar divisor is in no cached decision, so it is checked per call; the
    # Tensor overload's integer dtypes run where CPU's check runs (manifests/opencl.json).
    v, t = full[1], full[0]
    if type(v) in (int, bool) and v == 0 and not (t.dtype.is_floating_point or t.dtype.is_complex):
        raise RuntimeError("ZeroDivisionError")


def _check_normal_std(pos: int):
    # ATen's normal: std >= 0 (the meta functions and the vendor kernels take any value)
    def check(sch, full) -> None:
        std = full[pos]
        if type(std) in (int, float) and std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")

    return check


def _check_uniform_range(sch, full) -> None:
    # ATen's uniform_impl_: each bound within the dtype's range, then from <= to
    t, lo, hi = full[0], full[1], full[2]
    if not t.dtype.is_floating_point or type(lo) not in (int, float) or type(hi) not in (int, float):
        return
    info = torch.finfo(t.dtype)
    for name, v in (("from", lo), ("to", hi)):
        if not info.min <= v <= info.max:
            raise RuntimeError(f"{name} is out of bounds for {CPP_TYPE_NAME[t.dtype]}")
    if lo > hi:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={lo:g} > to={hi:g}")


def _check_bernoulli_p(sch, full) -> None:
    p = full[1]
    if type(p) in (int, float) and not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p:g}")


VALUE_CHECKS = {op: _check_value(pos) for op, pos in _VALUE_AT.items()}
VALUE_CHECKS["aten::normal_"] = _check_normal_std(2)
VALUE_CHECKS["aten::normal.float_float"] = _check_normal_std(1)
VALUE_CHECKS["aten::normal.float_float_out"] = _check_normal_std(1)
VALUE_CHECKS["aten::uniform_"] = _check_uniform_range
VALUE_CHECKS["aten::bernoulli_.float"] = _check_bernoulli_p
for _name in ("remainder.Scalar", "remainder_.Scalar", "remainder.Scalar_out"):
    VALUE_CHECKS[f"aten::{_name}"] = _check_integer_divisor
VALUE_CHECKS.update({op: _check_bounds(1, 2) for op in ("aten::clamp", "aten::clamp_")})
VALUE_CHECKS.update({f"aten::{op}{sfx}": _check_bounds(1) for op in ("clamp_min", "clamp_max") for sfx in ("", "_")})
