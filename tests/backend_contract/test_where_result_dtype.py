"""`torch.where(cond, x, y)` keeps every bit of its values in the result dtype, as on CPU: on
ral:1 the OpenCL kernel (which computes in float) took float64 values because the manifest
entry named only the condition's dtype, and rounded them to float32 with no error
(1.0000000001 came back 1.0; PyTorch's test_reference_masked found it). The entry now names
the result dtypes the kernel computes in; other dtypes go to another tier. Float64, int64
past float's 24 bits, mixed operand dtypes, the half types and a broadcast scalar operand, on
both devices, in both styles; compared with CPU exactly."""

import pytest
import torch
from cpu_outcomes import check_results

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _program(cond, x64, i64, x32, h):
    return [
        torch.where(cond, x64, -x64),
        torch.where(cond, i64, i64 * 3),
        torch.where(cond, x32, x64),  # promotes to float64
        torch.where(cond, i64, x32),  # promotes to float32
        torch.where(cond, h, -h),
        torch.where(cond, x64, 0.25),  # a Python number on the other side
        x64.where(cond, x64 * 2),
    ]


def _inputs():
    g = torch.Generator().manual_seed(0)
    cond = torch.rand(3, 5, generator=g) > 0.5
    x64 = 1 + torch.rand(3, 5, generator=g, dtype=torch.float64) * 1e-9  # low bits only float64 holds
    i64 = torch.randint(2**40, 2**41, (3, 5), generator=g)
    x32 = torch.rand(3, 5, generator=g)
    h = torch.rand(3, 5, generator=g).to(torch.bfloat16)
    return cond, x64, i64, x32, h


@pytest.mark.parametrize("device", DEVICES)
def test_where_keeps_the_result_dtype_on_device(device):
    ins = _inputs()
    got = _program(*(t.to(device) for t in ins))
    assert all(g.device == torch.device(device) for g in got)
    check_results(got, _program(*ins))


@pytest.mark.parametrize("device", DEVICES)
def test_where_keeps_the_result_dtype_under_ral_mode(device):
    ins = _inputs()
    expected = _program(*ins)
    with torch_fl.ral_mode(device):
        got = _program(*ins)
    check_results(got, expected)
