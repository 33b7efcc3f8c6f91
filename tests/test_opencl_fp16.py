"""float16 on the OpenCL device (issues 17 and 37): every OpenCL device declares float16 and
bfloat16, with or without cl_khr_fp16 (PoCL has none), because the kernels only load and
store 16 bits (vload_half/vstore_half, core OpenCL 1.2; ral_half.h for bfloat16) and compute
in float. So the plugin reads LOADED with no dtype note, and float16 ops run in the vendor
tier in the same process, compared with CPU: float16 results within one float16 ulp (rtol
1e-3), sums with atol scaled by the row length. Per-family coverage of both 16-bit types is
in tests/test_opencl_half.py."""

from __future__ import annotations

import pytest
import torch

import torch_fl
from torch_fl.dispatch import router


def _ocl():
    p = next((p for p in torch_fl.plugins() if p.record.name == "opencl"), None)
    return p if p is not None and p.record.status == "LOADED" and p.devices else None


P = _ocl()
pytestmark = pytest.mark.skipif(P is None, reason="no OpenCL device (plugin not built or no platform)")


def test_every_opencl_device_declares_both_16_bit_floats():
    rec = next(d for d in torch_fl.devices() if d.index == P.devices[0])
    assert rec.dtype_mask & (1 << 6) and rec.dtype_mask & (1 << 7), bin(rec.dtype_mask)
    assert rec.fp16  # DeviceRecord.fp16: the device's own kernels compute float16
    # Nothing the manifest declares is refused, so no dtype note either.
    assert P.status == "LOADED" and not P.disabled and P.notes == [], (P.status, P.reason, P.notes)


def test_float16_kernels_match_cpu_without_cl_khr_fp16():
    dev = f"ral:{P.devices[0]}"
    torch.manual_seed(0)
    x, y = torch.randn(300, 40).half(), torch.rand(300, 40).half() + 0.5
    xd, yd = x.to(dev), y.to(dev)
    router.DECISIONS.clear()
    checks = [
        ((xd * yd + 1).cpu(), x * y + 1),
        ((xd / yd).cpu(), x / y),
        (torch.exp(xd).cpu(), torch.exp(x)),
        (torch.nn.functional.gelu(xd).cpu(), torch.nn.functional.gelu(x)),
        (torch.maximum(xd, yd).cpu(), torch.maximum(x, y)),
        (xd.float().cpu(), x.float()),
        (xd.float().half().cpu(), x),
        (xd.amax(1).cpu(), x.amax(1)),
    ]
    for got, want in checks:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(xd.sum(0).cpu().float(), x.float().sum(0), rtol=1e-3, atol=300 * 1e-3)
    torch.testing.assert_close(xd.mean().cpu().float(), x.float().mean(), rtol=1e-3, atol=1e-3)
    tiers = {str(k[0]): type(v).__name__ for k, v in router.DECISIONS.items()}
    assert tiers["aten.mul.Tensor"] == "VendorRun" and tiers["aten.sum.dim_IntList"] == "VendorRun", tiers
