"""nn.LSTM / nn.LSTMCell on ral devices against CPU; on ral:0 the fused cell ops
(_thnn_fused_lstm_cell and its backward, which ATen's LSTM calls for PrivateUse1 devices)
run as host vendor kernels (plugins/host/rnn.c).

Outputs, final states and every parameter and input gradient, 2-layer LSTMs with and
without bias, batch_first, a loss on the cell state only (the backward's grad_hy arrives
undefined), float32 on ral:0 and ral:1 in both styles, float16/bfloat16 on ral:0.
Tolerances: float32 rtol/atol 1e-4 (float32 GEMMs in another order, ral_fastmath's
sigmoid/tanh within 2.4 ulp); half types 2e-2 / 5e-2 (float32 reference, CPU has no half
LSTM of its own on every build).
"""

from __future__ import annotations

import pytest
import torch
from conftest import plugin_device

import torch_fl

CELL_OPS = ("aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl")


def _step(mod, x, state_loss):
    x = x.detach().requires_grad_()
    y, (h, c) = mod(x)
    loss = c.square().sum() if state_loss else y.square().sum() + h.sum()
    loss.backward()
    return [y, h, c, x.grad, *[p.grad for p in mod.parameters()]]


def _models(bias, batch_first, dtype=torch.float32):
    torch.manual_seed(0)
    ref = torch.nn.LSTM(6, 8, num_layers=2, bias=bias, batch_first=batch_first)
    mod = torch.nn.LSTM(6, 8, num_layers=2, bias=bias, batch_first=batch_first)
    mod.load_state_dict(ref.state_dict())
    return ref, mod.to(dtype)


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("variant", ["bias", "no_bias", "batch_first", "state_loss"])
def test_lstm_matches_cpu(variant, which, style):
    dev = plugin_device(which)
    ref, mod = _models(variant != "no_bias", variant == "batch_first")
    x = torch.randn(5, 3, 6)
    state_loss = variant == "state_loss"
    want = _step(ref, x, state_loss)
    with torch_fl.coverage() as cov:
        if style == "to":
            got = _step(mod.to(dev), x.to(dev), state_loss)
        else:
            with torch_fl.ral_mode(dev):
                got = _step(mod, x, state_loss)
    for k, (a, e) in enumerate(zip(got, want)):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4, msg=f"result {k}")
    if which == "host":
        ran = cov.ops_in_tier("vendor")
        # without biases the forward cell stays decomposed: torch's meta kernel for it
        # fails on absent biases, and the vendor tier needs it for the output shapes
        assert all(op in ran for op in CELL_OPS[variant == "no_bias" :]), cov.counts
        assert not cov.ops_in_tier("cpu"), cov.counts  # stack stays a decomposition into cat


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lstm_half_types(dtype):
    dev = plugin_device("host")
    ref, mod = _models(True, False, dtype)
    x = torch.randn(4, 2, 6)
    want = _step(ref, x, False)
    with torch_fl.coverage() as cov:
        got = _step(mod.to(dev), x.to(dtype).to(dev), False)
    tol = 2e-2 if dtype == torch.float16 else 5e-2
    for k, (a, e) in enumerate(zip(got, want)):
        scale = max(e.abs().max().item(), 1.0)
        torch.testing.assert_close(a.cpu().float(), e, rtol=tol, atol=tol * scale, msg=f"result {k}")
    assert all(op in cov.ops_in_tier("vendor") for op in CELL_OPS), cov.counts


def test_lstm_cell_module_matches_cpu():
    """nn.LSTMCell (one step, given state) takes the same fused op."""
    dev = plugin_device("host")
    torch.manual_seed(0)
    ref = torch.nn.LSTMCell(5, 7)
    mod = torch.nn.LSTMCell(5, 7).to(dev)
    mod.load_state_dict(ref.state_dict())
    x, h, c = torch.randn(4, 5), torch.randn(4, 7), torch.randn(4, 7)
    hy, cy = ref(x, (h, c))
    (hy.sum() + cy.square().sum()).backward()
    with torch_fl.coverage() as cov:
        ghy, gcy = mod(x.to(dev), (h.to(dev), c.to(dev)))
        (ghy.sum() + gcy.square().sum()).backward()
    torch.testing.assert_close(ghy.cpu(), hy, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gcy.cpu(), cy, rtol=1e-5, atol=1e-5)
    for p, q in zip(mod.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)
    assert all(op in cov.ops_in_tier("vendor") for op in CELL_OPS), cov.counts


def test_bad_gate_shape_raises_and_device_keeps_working():
    dev = plugin_device("host")
    g, cx, b = torch.randn(3, 12).to(dev), torch.randn(3, 4).to(dev), torch.zeros(12).to(dev)
    with pytest.raises(RuntimeError):
        torch.ops.aten._thnn_fused_lstm_cell(g, g, cx, b, b)  # 12 gates for 4 hidden: not 4H
    z, zb = torch.zeros(3, 16).to(dev), torch.zeros(16).to(dev)
    with torch_fl.coverage() as cov:
        hy, cy, _ = torch.ops.aten._thnn_fused_lstm_cell(z, z, cx, zb, zb)
    torch.testing.assert_close(cy.cpu(), 0.5 * cx.cpu())
    torch.testing.assert_close(hy.cpu(), 0.5 * torch.tanh(0.5 * cx.cpu()))
    assert CELL_OPS[0] in cov.ops_in_tier("vendor"), cov.counts
