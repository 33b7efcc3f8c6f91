"""Casts on the OpenCL device (issue 12): copy_ is matched on its destination's dtype only,
so its kernel must decode every source dtype. Each pair is compared with torch CPU exactly
(a cast is a pure function of the value), including bfloat16 sources and destinations,
int64 <-> float64 beyond 2^24, and the bfloat16 softmax that runs on these casts."""

from __future__ import annotations

import pytest
import torch
from conftest import opencl_device

DEV = opencl_device()
pytestmark = pytest.mark.skipif(DEV is None, reason="no OpenCL device (plugin not built or no platform)")

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]


def _values(src: torch.dtype, dst: torch.dtype) -> torch.Tensor:
    """Values every pair can represent without undefined behaviour (no negative to unsigned,
    nothing out of the destination's range), with fractions when the source is floating."""
    base = torch.tensor([0.0, 1.0, 2.0, 3.0, 7.0, 100.0, 127.0, 5.5, 0.25, 126.75])
    if src != torch.uint8 and dst != torch.uint8:
        base = torch.cat([base, -base[1:]])
    if src == torch.bool:
        base = base % 2
    return base.to(src)


@pytest.mark.parametrize("src", DTYPES, ids=str)
@pytest.mark.parametrize("dst", DTYPES, ids=str)
def test_cast_matches_cpu(src, dst):
    x = _values(src, dst)
    want = x.to(dst)
    got = x.to(DEV).to(dst)
    assert got.dtype == dst
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("src", DTYPES, ids=str)
def test_strided_cast_into_float32(src):
    x = _values(src, torch.float32).repeat(3).reshape(3, -1)
    dst = torch.zeros(x.shape[1], 3, device=DEV)
    dst.copy_(x.to(DEV).t())
    torch.testing.assert_close(dst.cpu(), x.t().float(), rtol=0, atol=0)


def test_int64_float64_exact_beyond_float32():
    x = torch.tensor([2**40 + 1, -(2**52) + 3, 123456789012], dtype=torch.int64)
    torch.testing.assert_close(x.to(DEV).double().cpu(), x.double(), rtol=0, atol=0)
    torch.testing.assert_close(x.double().to(DEV).long().cpu(), x, rtol=0, atol=0)


def test_bfloat16_rounds_to_nearest_even_and_keeps_specials():
    x = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.4e38, float("inf"), -float("inf"), float("nan"), -0.0])
    got = x.to(DEV).bfloat16().cpu()
    torch.testing.assert_close(got, x.bfloat16(), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_bfloat16_softmax_matches_cpu(fn):
    torch.manual_seed(0)
    x = (torch.randn(8, 33) * 4).bfloat16()
    want = fn(x, -1)
    got = fn(x.to(DEV), -1).cpu()
    assert got.dtype == torch.bfloat16
    # Both sides compute in float32 and round to bfloat16, but the decomposition rounds its
    # own intermediates: allow a bfloat16 ulp relative plus one ulp at |x| ~ 4 (2^-6). The
    # bug this guards against was off by ~1.
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=2**-6)
