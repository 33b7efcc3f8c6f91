"""The fused SDPA backward (host: host_sdpa_backward, one task per batch and head): one launch
per backward where the device has the kernel, gradients equal to PyTorch CPU's flash backward
(the same aten op on CPU) on every ral device, the math path where the kernel does not apply."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import launch_count
from test_sdpa_fused import DEVICES, GRAD, _check, _qkv

from torch_fl.tiers.attention import FUSED_BACKWARD, has_fused_kernel

OP = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_op_matches_cpu_flash_backward(dev, causal):
    q, k, v = _qkv(2, 3, 40, 40, 16, True, seed=4)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, causal)
    gout = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    ref = OP(gout, q, k, v, out, lse, 0.0, causal)
    got = OP(*(t.to(dev) for t in (gout, q, k, v, out, lse)), 0.0, causal)
    for i, (g, r) in enumerate(zip(got, ref)):
        assert g.shape == r.shape
        torch.testing.assert_close(g.cpu(), r, **GRAD, msg=f"gradient {i}")


@pytest.mark.parametrize("dev", DEVICES)
def test_backward_is_one_launch_where_the_kernel_exists(dev):
    q, k, v = (t.to(dev).requires_grad_() for t in _qkv(2, 4, 32, 48, 64, True))
    if not has_fused_kernel(q, FUSED_BACKWARD):
        pytest.skip(f"{dev} has no fused attention backward kernel (math path)")
    idx = torch.device(dev).index
    for kw in (dict(is_causal=True), dict(attn_mask=(torch.rand(2, 1, 32, 48) > 0.5).to(dev)), {}):
        out = F.scaled_dot_product_attention(q, k, v, **kw)
        gout = torch.ones_like(out)
        before = launch_count(idx)
        grads = torch.autograd.grad(out, (q, k, v), gout)  # no AccumulateGrad copies into the leaves
        # One kernel, writing each gradient in its input's [B, L, H, E] layout, as PyTorch's
        # meta kernel promises (compiled graphs view the gradients by it): no layout copies.
        assert launch_count(idx) - before == 1, kw
        assert [g.stride() for g in grads] == [t.stride() for t in (q, k, v)], kw


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("mask", ["float_leaf", "float_const", "bool"])
def test_masks_and_uneven_lengths(dev, mask):
    q, k, v = _qkv(2, 2, 19, 45, 24, False, seed=7)
    g = torch.Generator().manual_seed(8)
    if mask == "bool":
        m = torch.rand(2, 1, 19, 45, generator=g) > 0.4
        m[0, 0, 3] = False  # a query row with no visible key: zero output and gradient
    else:
        m = torch.randn(19, 45, generator=g)
        if mask == "float_const":  # a constant mask: no mask gradient, so the fused backward
            m = m.requires_grad_(False)
    _check(dev, q, k, v, m)
