"""float16 on the OpenCL device (issue 17): the manifest declares float16 for the kernels
that decode dtypes per element (element-wise, reductions, copies); the registry keeps
them only on a device whose dtype_mask has float16 (cl_khr_fp16). PoCL has no cl_khr_fp16,
so there the plugin reads LOADED with the note "float16: not supported by this device" and float16 ops still give CPU's
numbers through another tier. TORCH_FL_OPENCL_ASSUME_FP16=1 runs the float16 kernels on
PoCL anyway (they only need core vload_half/vstore_half), compared with CPU: float16
results within one float16 ulp (rtol 1e-3), sums with atol scaled by the row length."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import run_python  # noqa: E402


def _ocl():
    p = next((p for p in torch_fl.plugins() if p.record.name == "opencl"), None)
    return p if p is not None and p.record.status == "LOADED" and p.devices else None


P = _ocl()
pytestmark = pytest.mark.skipif(P is None, reason="no OpenCL device (plugin not built or no platform)")


def _has_fp16() -> bool:
    dev = next(d for d in torch_fl.devices() if d.index == P.devices[0])
    return bool(getattr(dev, "fp16", False))


def test_without_cl_khr_fp16_float16_is_refused_with_a_reason():
    if _has_fp16():
        pytest.skip("this OpenCL device reports cl_khr_fp16")
    # lacking a dtype is the device's nature, not a fault: LOADED, with a note
    assert P.status == "LOADED" and not P.disabled, (P.status, P.reason)
    assert P.notes == ["float16: not supported by this device"] and P.reason == P.notes[0]
    x = torch.randn(64).half()
    got = (x.to(f"ral:{P.devices[0]}") * 3 + 1).cpu()
    torch.testing.assert_close(got, x * 3 + 1, rtol=0, atol=0)


def test_float16_kernels_match_cpu_when_the_device_has_fp16():
    code = """
import torch, torch_fl
from torch_fl.dispatch import router
p = next(p for p in torch_fl.plugins() if p.record.name == "opencl")
assert p.status == "LOADED", (p.status, p.reason)
dev = "ral:%d" % p.devices[0]
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
print("ok")
"""
    r = run_python(code, env={"TORCH_FL_OPENCL_ASSUME_FP16": "1"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
