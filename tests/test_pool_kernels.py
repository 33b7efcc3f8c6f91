"""Pooling and upsampling as host vendor kernels (plugins/host/pool2d.c, upsample.c), against CPU.

max_pool2d (with indices: stride, padding, dilation, ceil_mode), avg_pool2d
(count_include_pad, divisor_override, ceil_mode), adaptive_avg_pool2d, nearest and
bilinear upsampling (scale factors, sizes, align_corners), forward and input gradient, in
float32 and the half types, NCHW and channels_last, on ral:0 and ral:1, in both styles. On
ral:0 forward and backward must run in the vendor tier. Tolerances: float32 1e-5 (pooling
is exact; bilinear sums four products); half types 1e-2 / 4e-2 relative to the largest
value (the host kernels accumulate overlapping gradients in float and round once, CPU's
half kernels round per addition).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import plugin_device

import torch_fl

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 4e-2}

CASES = {
    "max": (lambda t: F.max_pool2d(t, 3, 2, 1), "aten::max_pool2d_with_indices"),
    "max_dilated_ceil": (
        lambda t: F.max_pool2d(t, (3, 2), (2, 1), (1, 1), dilation=2, ceil_mode=True),
        "aten::max_pool2d_with_indices",
    ),
    "avg": (lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False), "aten::avg_pool2d"),
    "avg_divisor": (lambda t: F.avg_pool2d(t, 3, 2, 1, divisor_override=5), "aten::avg_pool2d"),
    "adaptive_avg": (lambda t: F.adaptive_avg_pool2d(t, (4, 3)), "aten::_adaptive_avg_pool2d"),
    "nearest_scale": (lambda t: F.interpolate(t, scale_factor=2.5, mode="nearest"), "aten::upsample_nearest2d"),
    "nearest_size": (lambda t: F.interpolate(t, size=(18, 7), mode="nearest"), "aten::upsample_nearest2d"),
    "bilinear_scale": (lambda t: F.interpolate(t, scale_factor=1.7, mode="bilinear"), "aten::upsample_bilinear2d"),
    "bilinear_corners": (
        lambda t: F.interpolate(t, size=(13, 20), mode="bilinear", align_corners=True),
        "aten::upsample_bilinear2d",
    ),
}


def _run(fn, x, g):
    x = x.detach().requires_grad_()
    y = fn(x)
    (y * g).sum().backward()  # not y.backward(g): in ral_mode g is a CPU tensor, as in a user's program
    return y, x.grad


def _close(got, want, dtype, what):
    scale = max(want.float().abs().max().item(), 1.0)
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=0, atol=TOL[dtype] * scale, msg=what)


def _check(case, dtype, layout, which, style):
    dev = plugin_device(which)
    fn, op = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(2, 5, 9, 11).to(dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    y = fn(x)
    g = torch.randn(y.shape).to(dtype)
    want_y, want_gx = _run(fn, x, g)
    with torch_fl.coverage() as cov:
        if style == "to":
            got_y, got_gx = _run(fn, x.to(dev), g.to(dev))
        else:
            with torch_fl.ral_mode(dev):
                got_y, got_gx = _run(fn, x, g)
    _close(got_y, want_y, dtype, "output")
    _close(got_gx, want_gx, dtype, "input gradient")
    if which == "host":
        assert got_y.stride() == want_y.stride() and got_gx.stride() == want_gx.stride()
        ran = cov.ops_in_tier("vendor")
        assert op in ran and f"{op}_backward" in ran, cov.counts
        assert not cov.ops_in_tier("cpu"), cov.counts


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_float32_matches_cpu(case, layout, which, style):
    _check(case, torch.float32, layout, which, style)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_half_types_match_cpu(case, layout, dtype):
    _check(case, dtype, layout, "host", "to")


def test_max_pool_indices_and_nan_match_cpu():
    """Indices are CPU's (first maximum; a NaN wins its window), on sliced (offset) input too."""
    dev = plugin_device("host")
    x = torch.randn(3, 4, 12, 10)
    x[0, 1, 2, 3] = float("nan")
    x[1, 2, 5:7, 4:6] = 7.0  # ties: CPU keeps the first
    view = x[1:, :, 1:, ::2]
    want = torch.ops.aten.max_pool2d_with_indices(view, [3, 3], [2, 2], [1, 1], [1, 1], True)
    got = torch.ops.aten.max_pool2d_with_indices(x.to(dev)[1:, :, 1:, ::2], [3, 3], [2, 2], [1, 1], [1, 1], True)
    torch.testing.assert_close(got[0].cpu(), want[0], equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got[1].cpu(), want[1])


def test_three_dim_input_and_no_grad():
    """[C, H, W] input, and max_pool2d under no_grad (CPU has a kernel without indices)."""
    dev = plugin_device("host")
    x = torch.randn(4, 9, 9)
    with torch.no_grad(), torch_fl.coverage() as cov:
        got = F.max_pool2d(x.to(dev), 2)
        got_avg = F.avg_pool2d(x.to(dev), 3, 1, 1)
    torch.testing.assert_close(got.cpu(), F.max_pool2d(x, 2), rtol=0, atol=0)
    torch.testing.assert_close(got_avg.cpu(), F.avg_pool2d(x, 3, 1, 1), rtol=1e-6, atol=1e-6)
    assert not cov.ops_in_tier("cpu"), cov.counts


def test_bad_input_raises_and_device_keeps_working():
    """A kernel larger than the padded input raises PyTorch's RuntimeError; the device still works."""
    dev = plugin_device("host")
    x = torch.randn(1, 2, 3, 3)
    with pytest.raises(RuntimeError):
        F.max_pool2d(x.to(dev), 2, 1, padding=2)  # padding over half the kernel
    with pytest.raises(RuntimeError):
        F.avg_pool2d(x.to(dev), 5)  # output would be empty
    torch.testing.assert_close(F.max_pool2d(x.to(dev), 2).cpu(), F.max_pool2d(x, 2))
