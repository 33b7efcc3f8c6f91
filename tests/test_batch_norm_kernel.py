"""native_batch_norm and its backward as host vendor kernels (plugins/host/bn.c), against CPU.

BatchNorm1d/2d/3d in training (batch statistics, running statistics updated in place with
momentum) and eval (running statistics), with and without affine parameters, forward values,
all gradients and the running statistics, on ral:0 and ral:1, in both styles. On ral:0 the
calls must run in the vendor tier. The manifest declares float32 only: for half inputs CPU
returns save_mean/save_invstd in the input dtype where the meta kernel says float32, so half
calls stay in the cpu tier (test_half_types checks their values whatever the tier).
Tolerances: float32 rtol/atol 1e-4 (per-channel sums in double, then float); float16 /
bfloat16 2e-2 / 5e-2.
"""

from __future__ import annotations

import pytest
import torch
from conftest import plugin_device

import torch_fl

TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 2e-2), torch.bfloat16: (5e-2, 5e-2)}


def _step(mod, x, grad):
    """One forward + backward; returns output, input grad, param grads, running stats."""
    x = x.detach().requires_grad_()
    y = mod(x)
    (y * grad).sum().backward()
    params = [p.grad for p in mod.parameters()]
    stats = [mod.running_mean, mod.running_var] if mod.track_running_stats else []
    return [y, x.grad, *params, *stats]


SHAPES = {1: (8, 5), 2: (4, 5, 6, 7), 3: (2, 5, 3, 4, 5)}
MODULES = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_batch_norm_matches_cpu(nd, training, affine, which, style):
    dev = plugin_device(which)
    torch.manual_seed(0)
    ref = MODULES[nd](5, affine=affine, momentum=0.3)
    with torch.no_grad():
        ref.running_mean.uniform_(-1, 1)
        ref.running_var.uniform_(0.5, 2)
        if affine:
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-1, 1)
    ref.train(training)
    mod = type(ref)(5, affine=affine, momentum=0.3)
    mod.load_state_dict(ref.state_dict())
    mod.train(training)
    x, grad = torch.randn(SHAPES[nd]) * 2 + 0.5, torch.randn(SHAPES[nd])
    want = _step(ref, x, grad)
    with torch_fl.coverage() as cov:
        if style == "to":
            mod = mod.to(dev)
            got = _step(mod, x.to(dev), grad.to(dev))
        else:
            with torch_fl.ral_mode(dev):
                got = _step(mod, x, grad)
    for k, (a, e) in enumerate(zip(got, want)):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4, msg=f"result {k}")
    if which == "host":
        ran = cov.ops_in_tier("vendor")
        assert "aten::native_batch_norm" in ran and "aten::native_batch_norm_backward" in ran, cov.counts


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_half_types(which, dtype):
    dev = plugin_device(which)
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 5, 6, 6).to(dtype), torch.rand(5).to(dtype) + 0.5, torch.randn(5).to(dtype)
    rm, rv = torch.zeros(5, dtype=dtype), torch.ones(5, dtype=dtype)
    want = torch.ops.aten.native_batch_norm(x.float(), w.float(), b.float(), rm.float(), rv.float(), True, 0.1, 1e-5)
    rmd, rvd = rm.to(dev), rv.to(dev)
    got = torch.ops.aten.native_batch_norm(x.to(dev), w.to(dev), b.to(dev), rmd, rvd, True, 0.1, 1e-5)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got[0].cpu().float(), want[0], rtol=rtol, atol=atol)
    torch.testing.assert_close(
        rmd.cpu().float(), rm.float() * 0.9 + 0.1 * x.float().mean((0, 2, 3)), rtol=rtol, atol=atol
    )


def test_eval_without_running_stats_raises_and_device_keeps_working():
    """Host only: on ral:1 this call reaches PyTorch's CPU kernel through the cpu tier, and
    that kernel crashes the process (reported, left alone)."""
    dev = plugin_device("host")
    x = torch.randn(4, 3, 5, 5)
    # PyTorch's CPU kernel crashes the process on this call (torch 2.13: SIGSEGV); its meta
    # kernel, which the device path runs first, raises AssertionError with the reason
    with pytest.raises((RuntimeError, AssertionError), match="running_mean and running_var"):
        torch.ops.aten.native_batch_norm(x.to(dev), None, None, None, None, False, 0.1, 1e-5)
    y = torch.nn.functional.batch_norm(x.to(dev), None, None, training=True)
    torch.testing.assert_close(
        y.cpu(), torch.nn.functional.batch_norm(x, None, None, training=True), rtol=1e-4, atol=1e-4
    )
