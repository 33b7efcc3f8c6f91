"""Casts between float32 and float16/bfloat16 (autocast's casts around every matmul) on both
devices give torch's CPU bits: ral:0's host copy (plugins/host/copy.c `cast_*`, vectorized per
CPU level) and ral:1's 16-lane `copy_h16c` kernel (plugins/opencl/kernels/ew.cl) for contiguous
operands, the per-element `copy_castc` for strided ones.

Widening: every one of the 65536 bit patterns. Rounding: 2^20 random float32 bit patterns plus
the values around each 16-bit rounding boundary (ties to even, overflow to infinity,
subnormals, signed zeros, infinities), at a storage offset and with a tail past the last
16-lane block, contiguous and through a stride-2 view. NaN is compared by position (the
kernels store the quiet NaN; CPU keeps the payload's sign). A child process with
`TORCH_FL_OPENCL_PROFILE` checks that contiguous casts on ral:1 ran `copy_h16c`.
"""

from __future__ import annotations

import pytest
import torch
from conftest import opencl_kernels_run, plugin_device

PLUGINS = ["host", "opencl"]
HALF = [torch.float16, torch.bfloat16]


def _same_bits(got, want, bits):
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    differ = got.view(bits)[~nan] != want.view(bits)[~nan]
    assert not differ.any(), (got[~nan][differ][:5].tolist(), want[~nan][differ][:5].tolist())


def _strided(t):
    s = torch.empty(2 * t.numel(), dtype=t.dtype, device=t.device)[::2]
    s.copy_(t)
    return s


def _floats(dtype):
    """float32 values at storage offset 3: random bit patterns, boundary values, specials."""
    g = torch.Generator().manual_seed(11)
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 20,), generator=g, dtype=torch.int64).to(torch.int32)
    patterns = _all_half(dtype).float()  # every representable value ...
    step = torch.finfo(dtype).eps * patterns.abs() + torch.finfo(dtype).smallest_normal * 2**-10
    near = torch.cat([patterns + step / 2, patterns - step / 2, patterns * (1 + 2**-12)])  # ... ties and near ties
    specials = torch.tensor(
        [0.0, -0.0, float("inf"), -float("inf"), float("nan"), 65504.0, 65520.0, 65519.99, 3.4e38, 1e-45]
    )
    x = torch.cat([torch.zeros(3), bits.view(torch.float32), near, specials, torch.randn(13, generator=g)])
    return x[3:]


def _all_half(dtype):
    return torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_widening_every_bit_pattern(plugin, dtype):
    dev = plugin_device(plugin)
    h = torch.cat([torch.zeros(5, dtype=dtype), _all_half(dtype)])[5:]  # offset, tail of 0
    want = h.float()
    d = h.to(dev)
    _same_bits(d.float().cpu(), want, torch.int32)
    _same_bits(_strided(d).float().cpu(), want, torch.int32)
    out = torch.empty(h.numel(), device=dev)
    out.copy_(d)
    _same_bits(out.cpu(), want, torch.int32)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_rounding_matches_cpu_bits(plugin, dtype):
    dev = plugin_device(plugin)
    x = _floats(dtype)
    want = x.to(dtype)
    d = x.to(dev)
    _same_bits(d.to(dtype).cpu(), want, torch.int16)
    _same_bits(_strided(d).to(dtype).cpu(), want, torch.int16)
    out = torch.empty(x.numel(), dtype=dtype, device=dev)
    out.copy_(d)
    _same_bits(out.cpu(), want, torch.int16)


_CHILD = """
import torch, torch_fl
dev = {dev!r}
x = torch.randn(100003).to(dev)
for dt in (torch.float16, torch.bfloat16):
    x.to(dt).float()
torch.ral.synchronize(dev)
print("CHILD-DONE")
"""


def test_contiguous_casts_run_the_16_lane_kernel_on_opencl(tmp_path):
    names = opencl_kernels_run(_CHILD.format(dev=plugin_device("opencl")), tmp_path)
    assert names.count("copy_h16c") >= 4, names[:2000]
    assert "copy_castc" not in names, names[:2000]
