"""Max pooling on the OpenCL plugin (plugins/opencl/pool.c) and a CNN training step on ral:1.

max_pool2d_with_indices and its backward: values, indices (NaN wins, as CPU's kernel) and
grad_input against PyTorch CPU, exactly (a max is exact; the backward sums each input's
gradients in CPU's order), over kernel/stride/padding/dilation/ceil_mode variants, 3-d and
4-d inputs, on ral:0 and ral:1 in both styles; on ral:1 both ops must run in the vendor
tier. A small conv + BN + ReLU + max-pool training step on ral:1 keeps convolution, batch
norm and pooling (forward and backward) out of the cpu tier and matches CPU's loss,
gradients and running statistics (rtol/atol 1e-4).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import plugin_device
from torch import nn

import torch_fl

POOL_OPS = ("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward")

# kernel_size, stride, padding, dilation, ceil_mode, input shape
POOLS = [
    ((2, 2), (2, 2), (0, 0), (1, 1), False, (2, 3, 8, 8)),
    ((3, 3), (2, 2), (1, 1), (1, 1), True, (2, 3, 9, 11)),
    ((3, 3), (1, 1), (1, 1), (2, 2), False, (3, 9, 10)),
    ((2, 3), (1, 2), (1, 1), (1, 1), True, (1, 2, 7, 6)),
]


def _pool(x, cfg):
    k, s, p, d, ceil, _ = cfg
    return F.max_pool2d(x, k, s, p, d, ceil, return_indices=True)


def _pool_step(x, grad, cfg):
    y, idx = _pool(x, cfg)
    (y * grad).sum().backward()  # in ral_mode the CPU grad is uploaded by the mode
    return y.detach(), idx, x.grad


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("cfg", POOLS, ids=[f"k{c[0]}s{c[1]}p{c[2]}d{c[3]}c{int(c[4])}" for c in POOLS])
def test_max_pool2d_matches_cpu(cfg, which, style):
    dev = plugin_device(which)
    torch.manual_seed(0)
    x = torch.randn(cfg[5])
    x.view(-1)[3] = float("nan")  # NaN wins its windows, index and all
    xr = x.clone().requires_grad_()
    y, idx = _pool(xr, cfg)
    grad = torch.randn(y.shape)
    y.backward(grad)
    want = (y.detach(), idx, xr.grad)
    with torch_fl.coverage() as cov:
        if style == "to":
            got = _pool_step(x.to(dev).requires_grad_(), grad.to(dev), cfg)
        else:
            xm = x.clone().requires_grad_()
            with torch_fl.ral_mode(dev):
                got = _pool_step(xm, grad, cfg)
    for name, a, e in zip(("output", "indices", "grad_input"), got, want):
        torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0, equal_nan=True, msg=f"{dev} {style}: {name}")
    if which == "opencl":
        assert set(POOL_OPS) <= set(cov.ops_in_tier("vendor")), cov.counts


def test_max_pool2d_bad_input_raises_and_device_keeps_working():
    dev = plugin_device("opencl")
    x = torch.randn(2, 3, 8, 8).to(dev)
    with pytest.raises(RuntimeError, match="pad"):
        F.max_pool2d(x, 2, 2, padding=2)  # padding above half the kernel
    y, _ = F.max_pool2d(x, 2, 2, return_indices=True)
    torch.testing.assert_close(y.cpu(), F.max_pool2d(x.cpu(), 2, 2), rtol=0, atol=0)


def _cnn():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 1, 1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, 2, 1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10),
    )


def _train_step(model, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    grads = [p.grad.detach() for p in model.parameters()]
    stats = [b.detach() for b in model.buffers() if b.is_floating_point()]
    return loss.detach(), grads, stats


@pytest.mark.parametrize("style", ["to", "mode"])
def test_cnn_training_step_stays_on_the_device(style):
    dev = plugin_device("opencl")
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)
    want = _train_step(_cnn(), x, y)
    model = _cnn()
    with torch_fl.coverage() as cov:
        if style == "to":
            got = _train_step(model.to(dev), x.to(dev), y.to(dev))
        else:
            with torch_fl.ral_mode(dev):
                got = _train_step(model, x, y)
    torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-4, atol=1e-4)
    for a, e in zip(got[1] + got[2], want[1] + want[2]):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4)
    on_cpu = set(cov.ops_in_tier("cpu"))
    for op in ("convolution", "convolution_backward", "native_batch_norm", "native_batch_norm_backward", *POOL_OPS):
        op = op if op.startswith("aten::") else f"aten::{op}"
        assert op in cov.ops_in_tier("vendor") and op not in on_cpu, cov.counts
