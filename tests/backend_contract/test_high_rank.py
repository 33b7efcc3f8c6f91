"""Tensors of more than 16 dims (the packed call's RAL_MAX_RANK) through element-wise ops, as
CPU computes them: PyTorch's test_view views a tensor as 18 dims and compares it, and ral:0's
jit tier launched a kernel the runtime refused ("malformed tensor 0 in packed call"). Such calls
now leave the jit tier (the cpu tier runs them). Values against CPU: exact for comparisons,
negation and copies, float32 add/mul within rtol=1.3e-6, atol=1e-5 (torch's float32 default;
CPU's vectorised loops may round otherwise). Both devices, both styles."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
SHAPES = [(1,) * 18, (2,) * 17, (1, 2) * 9]


def _program(t):
    u = t.transpose(0, 1)  # a strided operand
    return [t == t, t + 1, -t, t * u, (t + u).contiguous(), torch.where(t > 0.5, t, u)]


def _inputs(shape):
    return torch.rand(shape, generator=torch.Generator().manual_seed(len(shape)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"rank{len(s)}x{max(s)}")
def test_elementwise_ops_above_rank_16_match_cpu(device, shape):
    t = _inputs(shape)
    expected = _program(t)
    got = _program(t.to(device))
    for g, e in zip(got, expected, strict=True):
        assert g.device == torch.device(device) and g.shape == e.shape
        torch.testing.assert_close(g.cpu(), e, rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_view_to_18_dims_compares_as_on_cpu(device):
    # test_view's case: a permuted 8-dim tensor viewed as 18 dims, compared with its copy
    t = torch.rand(4, 2, 5, 1, 6, 2, 9, 3).transpose(-1, 2).transpose(-2, 3)
    size = [1, 1, 2, 1, 4, 3, 1, 1, 9, 1, 2, 1, 2, 3, 1, 5, 1, 1]
    d = t.to(device)
    assert torch.equal(d.view(*size).cpu(), t.view(*size))
    assert bool((d.view(*size) == d.clone().view(*size)).all())


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_ops_above_rank_16_under_ral_mode_match_cpu(device):
    t = _inputs((2,) * 17)
    expected = _program(t)
    with torch_fl.ral_mode(device):
        got = _program(t)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, rtol=1.3e-6, atol=1e-5)
