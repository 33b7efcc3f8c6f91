"""nn.LSTM / nn.GRU / nn.LSTMCell on ral devices against CPU, with the fused cell ops that
ATen's recurrent layers call for PrivateUse1 devices (_thnn_fused_lstm_cell,
_thnn_fused_gru_cell and their backward ops) running as vendor kernels: host
(plugins/host/rnn.c) on ral:0, OpenCL (plugins/opencl/rnn.c, kernels/rnn.cl; on PoCL a
float32 cell on an idle stream runs inline on the calling thread) on ral:1.

Outputs, final states and every parameter and input gradient: 2-layer LSTMs and GRUs with
and without bias, batch_first, bidirectional, a loss on the LSTM cell state only (the
backward's grad_hy arrives undefined), float32 on ral:0 and ral:1 in both styles,
float16/bfloat16 on both. The workspaces match the decompositions' (tiers/rnn_cells.py), so
forward and backward may run on different tiers. Tolerances: float32 rtol/atol 1e-4 (GEMMs
in another order, ral_fastmath's or OpenCL's sigmoid/tanh within a few ulp); half types
2e-2 / 5e-2 relative to the largest magnitude (float32 reference).
"""

from __future__ import annotations

import ctypes

import pytest
import torch
from conftest import plugin_device

import torch_fl
from torch_fl.tiers import rnn_cells

aten = torch.ops.aten
LSTM_OPS = ("aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl")
GRU_OPS = ("aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward")


def _step(mod, x, state_loss=False):
    x = x.detach().requires_grad_()
    y, state = mod(x)
    if isinstance(state, tuple):  # LSTM: (h, c)
        h, c = state
        loss = c.square().sum() if state_loss else y.square().sum() + h.sum()
        outs = [y, h, c]
    else:
        loss, outs = y.square().sum() + state.sum(), [y, state]
    loss.backward()
    return [*outs, x.grad, *[p.grad for p in mod.parameters()]]


def _models(kind, dtype=torch.float32, **kw):
    torch.manual_seed(0)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    ref, mod = cls(6, 8, **kw), cls(6, 8, **kw)
    mod.load_state_dict(ref.state_dict())
    return ref, mod.to(dtype)


def _run(mod, x, dev, style, state_loss=False):
    with torch_fl.coverage() as cov:
        if style == "to":
            got = _step(mod.to(dev), x.to(dev), state_loss)
        else:
            with torch_fl.ral_mode(dev):
                got = _step(mod, x, state_loss)
    return got, cov


def _close(got, want, rtol=1e-4, atol=1e-4):
    assert len(got) == len(want)
    for k, (a, e) in enumerate(zip(got, want)):
        torch.testing.assert_close(a.cpu(), e, rtol=rtol, atol=atol, msg=f"result {k}")


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("variant", ["bias", "no_bias", "batch_first", "state_loss"])
def test_lstm_matches_cpu(variant, which, style):
    dev = plugin_device(which)
    ref, mod = _models("lstm", num_layers=2, bias=variant != "no_bias", batch_first=variant == "batch_first")
    x = torch.randn(5, 3, 6)
    state_loss = variant == "state_loss"
    got, cov = _run(mod, x, dev, style, state_loss)
    _close(got, _step(ref, x, state_loss))
    # every cell, forward and backward, ran fused: also without biases, where torch's meta
    # kernel fails and the vendor tier's own output spec (tiers/output_specs.py) serves
    assert all(op in cov.ops_in_tier("vendor") for op in LSTM_OPS), cov.counts
    assert not set(cov.ops_in_tier("decomp")) & set(LSTM_OPS), cov.counts


GRU_VARIANTS = {
    "bias": {"num_layers": 2},
    "no_bias": {"num_layers": 2, "bias": False},
    "batch_first": {"num_layers": 2, "batch_first": True},
    "bidirectional": {"num_layers": 1, "bidirectional": True},
}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("variant", list(GRU_VARIANTS))
def test_gru_matches_cpu(variant, which, style):
    dev = plugin_device(which)
    ref, mod = _models("gru", **GRU_VARIANTS[variant])
    x = torch.randn(5, 3, 6)
    got, cov = _run(mod, x, dev, style)
    _close(got, _step(ref, x))
    assert all(op in cov.ops_in_tier("vendor") for op in GRU_OPS), cov.counts
    assert not set(cov.ops_in_tier("decomp")) & set(GRU_OPS), cov.counts


def check_half(dtype, dev, kind):
    """A half-type 2-layer model on dev against the float32 CPU model, cells fused."""
    ref, mod = _models(kind, dtype, num_layers=2)
    x = torch.randn(4, 2, 6)
    want = _step(ref, x)
    with torch_fl.coverage() as cov:
        got = _step(mod.to(dev), x.to(dtype).to(dev))
    tol = 2e-2 if dtype == torch.float16 else 5e-2
    for k, (a, e) in enumerate(zip(got, want)):
        scale = max(e.abs().max().item(), 1.0)
        torch.testing.assert_close(a.cpu().float(), e, rtol=tol, atol=tol * scale, msg=f"result {k}")
    ops = LSTM_OPS if kind == "lstm" else GRU_OPS
    assert all(op in cov.ops_in_tier("vendor") for op in ops), cov.counts


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_host(dtype, kind):
    check_half(dtype, plugin_device("host"), kind)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_opencl(dtype):
    """float16 and bfloat16 cells on ral:1: every OpenCL device declares both (the kernels
    load and store 16 bits through vload_half/vstore_half and ral_half.h and compute in float,
    no cl_khr_fp16 needed)."""
    dev = plugin_device("opencl")
    for kind in ("lstm", "gru"):
        check_half(dtype, dev, kind)


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
    assert all(op in cov.ops_in_tier("vendor") for op in LSTM_OPS), cov.counts


def _cell_inputs(kind, bias=True):
    torch.manual_seed(1)
    width = 4 if kind == "lstm" else 3
    ig, hg, state = torch.randn(3, width * 5), torch.randn(3, width * 5), torch.randn(3, 5)
    b = (torch.randn(width * 5), torch.randn(width * 5)) if bias else (None, None)
    return ig, hg, state, *b


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_cell_ops_match_decomposition(which, kind, bias):
    """The kernels' outputs, workspaces and gradients equal the decompositions' on CPU
    (CUDA's layouts), so a workspace from one tier feeds the other's backward."""
    dev = plugin_device(which)
    args = _cell_inputs(kind, bias)
    on_dev = [None if a is None else a.to(dev) for a in args]
    with torch_fl.coverage() as cov:
        want, got, want_b, got_b = _cells_both_ways(kind, args, on_dev, dev, bias)
    _close(list(got), list(want), 1e-5, 1e-5)
    assert [t is None for t in got_b] == [t is None for t in want_b]
    _close([t for t in got_b if t is not None], [t for t in want_b if t is not None], 1e-5, 1e-5)
    assert all(op in cov.ops_in_tier("vendor") for op in (LSTM_OPS if kind == "lstm" else GRU_OPS)), cov.counts


def _cells_both_ways(kind, args, on_dev, dev, bias):
    """(decomposition forward, device forward, decomposition backward, device backward)."""
    if kind == "lstm":
        want = rnn_cells.lstm_cell(*args)
        got = aten._thnn_fused_lstm_cell(*on_dev)
        ghy, gcy = torch.randn(3, 5), torch.randn(3, 5)
        want_b = rnn_cells.lstm_cell_backward(ghy, gcy, args[2], want[1], want[2], bias)
        # the device's backward reads the decomposition's workspace
        got_b = aten._thnn_fused_lstm_cell_backward_impl(
            ghy.to(dev), gcy.to(dev), on_dev[2], want[1].to(dev), want[2].to(dev), bias
        )
    else:
        want = rnn_cells.gru_cell(*args)
        got = aten._thnn_fused_gru_cell(*on_dev)
        ghy = torch.randn(3, 5)
        want_b = rnn_cells.gru_cell_backward(ghy, want[1], bias)
        got_b = aten._thnn_fused_gru_cell_backward(ghy.to(dev), want[1].to(dev), bias)
    return want, got, want_b, got_b


def test_opencl_inline_and_queued_paths_agree():
    """On PoCL a float32 cell on an idle stream runs on the calling thread; the queued
    kernels (GPUs, TORCH_FL_OPENCL_INLINE=0) must give the same results."""
    dev = plugin_device("opencl")
    p = next(p for p in torch_fl.plugins() if p.record.name == "opencl")
    so = ctypes.CDLL(p.record.library)
    so.ral_opencl_inline.restype = ctypes.c_int
    if so.ral_opencl_inline(-1) < 0:
        pytest.skip(f"{dev} cannot run commands inline (not a host-unified CPU device, or TORCH_FL_OPENCL_INLINE=0)")
    n = so.ral_opencl_counters(None, 0)
    so.ral_opencl_counter_name.restype = ctypes.c_char_p
    names = [so.ral_opencl_counter_name(i).decode() for i in range(n)]

    def counts():
        out = (ctypes.c_uint64 * n)()
        so.ral_opencl_counters(out, n)
        return dict(zip(names, out))

    args = [a.to(dev) for a in _cell_inputs("gru")]
    want = rnn_cells.gru_cell(*[a.cpu() for a in args])
    prev = so.ral_opencl_inline(0)
    try:
        results = {}
        for on in (0, 1):
            so.ral_opencl_inline(on)
            torch.ral.synchronize(dev)  # an idle stream: the inline path may take the call
            a = counts()
            results[on] = aten._thnn_fused_gru_cell(*args)
            b = counts()
            ran_inline = b["inline_ops"] - a["inline_ops"]
            queued = b["kernels"] - a["kernels"]
            assert (ran_inline, queued) == ((1, 0) if on else (0, 1)), (on, ran_inline, queued)
            _close(list(results[on]), list(want), 1e-5, 1e-5)
    finally:
        so.ral_opencl_inline(prev)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_bad_gate_shape_raises_and_device_keeps_working(which, kind):
    dev = plugin_device(which)
    op = aten._thnn_fused_lstm_cell if kind == "lstm" else aten._thnn_fused_gru_cell
    width = 4 if kind == "lstm" else 3
    g, state, b = torch.randn(3, 12).to(dev), torch.randn(3, 5).to(dev), torch.zeros(12).to(dev)
    with pytest.raises(RuntimeError, match=rf"_thnn_fused_{kind}_cell.*expected input_gates \[B, {width}H\]"):
        op(g, g, state, b, b)  # 12 gates for 5 hidden units
    state_name = "cx" if kind == "lstm" else "hx"
    with pytest.raises(RuntimeError, match=rf"_thnn_fused_{kind}_cell: expected {state_name} of shape"):
        op(g, g, torch.randn(3).to(dev), b, b)  # a 1-d state
    with pytest.raises(RuntimeError, match=r"backward.*expected workspace \[B, [45]H\]"):
        if kind == "lstm":  # a GRU-sized workspace for the LSTM backward
            aten._thnn_fused_lstm_cell_backward_impl(state, state, state, state, torch.randn(3, 25).to(dev), True)
        else:
            aten._thnn_fused_gru_cell_backward(state, torch.randn(3, 20).to(dev), True)
    args = [a.to(dev) for a in _cell_inputs(kind)]
    want = (rnn_cells.lstm_cell if kind == "lstm" else rnn_cells.gru_cell)(*[a.cpu() for a in args])
    with torch_fl.coverage() as cov:
        got = op(*args)
    _close(list(got), list(want), 1e-5, 1e-5)
    assert f"aten::_thnn_fused_{kind}_cell" in cov.ops_in_tier("vendor"), cov.counts
