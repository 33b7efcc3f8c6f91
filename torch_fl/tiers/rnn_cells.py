"""The fused LSTM/GRU cell ops, written as aten ops for the decomp tier.

ATen's nn.LSTM/nn.GRU call `_thnn_fused_lstm_cell`/`_thnn_fused_gru_cell` (and their
backward ops) for every non-CPU device, CUDA's kernels being the only ones; CPU has no
kernel, so the cpu tier cannot serve them. Both plugins serve them as vendor kernels
(plugins/host/rnn.c, plugins/opencl/rnn.c); these decompositions are the fallback for a
device or dtype without them, and follow CUDA's
(aten/src/ATen/native/cuda/RNN.cu): the same gate order and the same workspace layout
that the backward op reads, so forward and backward may run on different tiers.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _gates(input_gates, hidden_gates, input_bias, hidden_bias):
    g = aten.add.Tensor(input_gates, hidden_gates)
    if input_bias is not None:
        g = aten.add.Tensor(g, input_bias)
    if hidden_bias is not None:
        g = aten.add.Tensor(g, hidden_bias)
    return g


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """(hy, cy, workspace); workspace holds the activated gates [i, f, g, o]."""
    i, f, g, o = aten.chunk.default(_gates(input_gates, hidden_gates, input_bias, hidden_bias), 4, 1)
    i, f, o = aten.sigmoid.default(i), aten.sigmoid.default(f), aten.sigmoid.default(o)
    g = aten.tanh.default(g)
    cy = aten.add.Tensor(aten.mul.Tensor(f, cx), aten.mul.Tensor(i, g))
    hy = aten.mul.Tensor(o, aten.tanh.default(cy))
    return hy, cy, aten.cat.default([i, f, g, o], 1)


def _dsigmoid(s):
    return aten.mul.Tensor(s, aten.rsub.Scalar(s, 1))


def _dtanh(t):
    return aten.rsub.Scalar(aten.mul.Tensor(t, t), 1)


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """(grad_gates, grad_cx, grad_bias) of lstm_cell; undefined incoming grads are zeros."""
    i, f, g, o = aten.chunk.default(workspace, 4, 1)
    tanh_cy = aten.tanh.default(cy)
    if grad_hy is None:
        grad_hy = aten.zeros_like.default(cy)
    gcx = aten.mul.Tensor(aten.mul.Tensor(grad_hy, o), _dtanh(tanh_cy))
    if grad_cy is not None:
        gcx = aten.add.Tensor(gcx, grad_cy)
    grad_o = aten.mul.Tensor(aten.mul.Tensor(grad_hy, tanh_cy), _dsigmoid(o))
    grad_i = aten.mul.Tensor(aten.mul.Tensor(gcx, g), _dsigmoid(i))
    grad_f = aten.mul.Tensor(aten.mul.Tensor(gcx, cx), _dsigmoid(f))
    grad_g = aten.mul.Tensor(aten.mul.Tensor(gcx, i), _dtanh(g))
    grad_gates = aten.cat.default([grad_i, grad_f, grad_g, grad_o], 1)
    grad_cx = aten.mul.Tensor(gcx, f)
    grad_bias = aten.sum.dim_IntList(grad_gates, [0]) if has_bias else None
    return grad_gates, grad_cx, grad_bias


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """(hy, workspace); workspace holds [r, z, n, hidden new-gate (with bias), hx]."""
    if input_bias is not None:
        input_gates = aten.add.Tensor(input_gates, input_bias)
    if hidden_bias is not None:
        hidden_gates = aten.add.Tensor(hidden_gates, hidden_bias)
    ir, ii, in_ = aten.chunk.default(input_gates, 3, 1)
    hr, hi, hn = aten.chunk.default(hidden_gates, 3, 1)
    r = aten.sigmoid.default(aten.add.Tensor(ir, hr))
    z = aten.sigmoid.default(aten.add.Tensor(ii, hi))
    n = aten.tanh.default(aten.add.Tensor(in_, aten.mul.Tensor(r, hn)))
    hy = aten.add.Tensor(n, aten.mul.Tensor(z, aten.sub.Tensor(hx, n)))
    return hy, aten.cat.default([r, z, n, hn, hx], 1)


def gru_cell_backward(grad_hy, workspace, has_bias):
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)."""
    r, z, n, hn, hx = aten.chunk.default(workspace, 5, 1)
    grad_hx = aten.mul.Tensor(grad_hy, z)
    grad_in = aten.mul.Tensor(aten.mul.Tensor(grad_hy, aten.rsub.Scalar(z, 1)), _dtanh(n))
    grad_z = aten.mul.Tensor(aten.mul.Tensor(grad_hy, aten.sub.Tensor(hx, n)), _dsigmoid(z))
    grad_r = aten.mul.Tensor(aten.mul.Tensor(grad_in, hn), _dsigmoid(r))
    grad_input_gates = aten.cat.default([grad_r, grad_z, grad_in], 1)
    grad_hidden_gates = aten.cat.default([grad_r, grad_z, aten.mul.Tensor(grad_in, r)], 1)
    if has_bias:
        return (
            grad_input_gates,
            grad_hidden_gates,
            grad_hx,
            aten.sum.dim_IntList(grad_input_gates, [0]),
            aten.sum.dim_IntList(grad_hidden_gates, [0]),
        )
    return grad_input_gates, grad_hidden_gates, grad_hx, None, None


# Ops with no CPU kernel (so no cpu tier to fall back to): always decomposed.
DEVICE_ONLY = {
    aten._thnn_fused_lstm_cell.default: lstm_cell,
    aten._thnn_fused_lstm_cell_backward_impl.default: lstm_cell_backward,
    aten._thnn_fused_gru_cell.default: gru_cell,
    aten._thnn_fused_gru_cell_backward.default: gru_cell_backward,
}
