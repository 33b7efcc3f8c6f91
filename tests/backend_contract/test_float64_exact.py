"""float64 values that ops only move (padding, tril/triu, slice_backward, cat, copies, fills)
come out bit-exact on every device, both styles. The OpenCL plugin moved them through float32
in its index kernels: F.pad, tril/triu and slice_backward of float64 data lost everything past
float32's 24 bits (relative error ~4e-8), and so did what builds on them (fft with n= padding,
conv with padding="same"). Checked with values float32 cannot hold."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
F = torch.nn.functional

CALLS = {
    "pad": lambda t: F.pad(t, (0, 3)),
    "pad_value": lambda t: F.pad(t, (1, 2, 3, 0), value=0.1234567890123),
    "pad_int_value": lambda t: F.pad(t, (1, 1), value=3),
    "pad_negative": lambda t: F.pad(t, (-1, 2)),
    "tril": lambda t: t.tril(),
    "triu": lambda t: t.triu(1),
    "slice_backward": lambda t: torch.ops.aten.slice_backward(t, [5, 6, 14], 2, 1, 14, 2),
    "cat": lambda t: torch.cat([t, t * 3], 1),
    "clone_transposed": lambda t: t.transpose(0, 2).contiguous(),
    "fill": lambda t: t.clone().fill_(0.1234567890123),
    "fft_padded": lambda t: torch.view_as_real(torch.fft.fft(t, n=10, dim=1, norm="ortho")),
}


def _run(call, x, device, style):
    if style == "to":
        return call(x.to(device)).cpu()
    with torch_fl.ral_mode(device):
        return call(x).cpu()


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("device", DEVICES)
def test_float64_moves_exactly(device, name, style):
    x = torch.randn(5, 6, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) / 3
    assert not torch.equal(x, x.float().double())  # values float32 would round
    want = CALLS[name](x)
    got = _run(CALLS[name], x, device, style)
    assert got.dtype == torch.float64
    if name == "fft_padded":  # arithmetic: float64 rounding, far below float32's 1e-7
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    else:
        assert torch.equal(got, want)
