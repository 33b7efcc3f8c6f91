"""torch.optim.Adam/AdamW's default step on ral parameters: one generated kernel per parameter
(torch_fl/jit/adam_step.py) whose parameters and state must match CPU's over several steps, on
both plugins; calls it does not claim run PyTorch's own loop and must match CPU as well."""

from __future__ import annotations

import pytest
import torch
from sweep_support import DEVICES, need_device

from torch_fl._native import lib
from torch_fl.jit import adam_step

VARIANTS = [
    {},
    {"weight_decay": 0.1},
    {"amsgrad": True},
    {"amsgrad": True, "weight_decay": 0.05, "maximize": True},
    {"maximize": True},
    {"betas": (0.3, 0.99)},  # 1 - beta1 >= 0.5: the other branch of PyTorch's lerp
    {"betas": (0.9, 0.999), "eps": 1e-3, "lr": 0.5},
]


def _params(dtype):
    g = torch.Generator().manual_seed(0)
    # a matrix, a vector, a 0-dim tensor, a strided view's copy and an empty tensor
    return [
        torch.randn(33, 7, generator=g, dtype=dtype),
        torch.randn(100, generator=g, dtype=dtype),
        torch.randn((), generator=g, dtype=dtype),
        torch.randn(4, 6, generator=g, dtype=dtype).t().contiguous(),
        torch.zeros(0, 3, dtype=dtype),
    ]


def _run(dev, cls, kw, dtype=torch.float32, steps=5):
    """(CPU params, ral params, CPU optimizer, ral optimizer) after `steps` steps on the same grads."""
    base = _params(dtype)
    cpu = [p.clone().requires_grad_() for p in base]
    ral = [p.to(dev).requires_grad_() for p in base]
    kw = {"lr": 1e-2, **kw}
    cpu_kw = {k: v for k, v in kw.items() if k != "capturable"}  # CPU cannot capture; same math
    oc, orl = cls(cpu, **cpu_kw), cls(ral, **kw)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        grads = [torch.randn(p.shape, generator=g, dtype=dtype) for p in base]
        for p, gr in zip(cpu, grads):
            p.grad = gr.clone()
        for p, gr in zip(ral, grads):
            p.grad = gr.to(dev)
        oc.step()
        orl.step()
    return cpu, ral, oc, orl


def _assert_match(cpu, ral, oc, orl, tol):
    for a, b in zip(cpu, ral):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), **tol)
        sa, sb = oc.state[a], orl.state[b]
        assert sorted(sa) == sorted(sb)
        for k in sa:
            torch.testing.assert_close(sb[k].cpu(), sa[k], **tol, msg=f"state {k}")


def _tol(dtype):
    # float32: the generated C may contract a*b + c into one fma where PyTorch rounds twice
    return {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-13}


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.Adam], ids=lambda c: c.__name__)
@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_kernel_step_matches_cpu(dev, cls, kw):
    need_device(dev)
    before = adam_step.STATS["steps"]
    cpu, ral, oc, orl = _run(dev, cls, kw)
    assert adam_step.STATS["steps"] - before == 5, "the generated kernel did not serve the steps"
    _assert_match(cpu, ral, oc, orl, _tol(torch.float32))


@pytest.mark.parametrize("dev", DEVICES)
def test_kernel_step_float64(dev):
    need_device(dev)
    idx = int(dev.split(":")[1])
    from torch_fl.jit.target import target_of

    target = target_of(idx)
    if target is None or torch.float64 not in target.dtypes:
        pytest.skip(f"{dev} generates no float64 kernels")
    cpu, ral, oc, orl = _run(dev, torch.optim.AdamW, {"weight_decay": 0.01, "amsgrad": True}, torch.float64)
    _assert_match(cpu, ral, oc, orl, _tol(torch.float64))


@pytest.mark.parametrize("dev", DEVICES)
def test_one_launch_per_nonempty_parameter(dev):
    need_device(dev)
    idx = int(dev.split(":")[1])
    ps = [torch.randn(64, 64, device=dev, requires_grad=True) for _ in range(6)]
    opt = torch.optim.AdamW(ps, lr=1e-3)
    for p in ps:
        p.grad = torch.randn_like(p)
    opt.step()  # first step: state initialised here (zeros_like launches)
    torch.ral.synchronize()
    n0 = lib.rt_launch_count(idx)
    opt.step()
    assert lib.rt_launch_count(idx) - n0 == len(ps)


@pytest.mark.parametrize("dev", DEVICES)
def test_version_counters_bump_like_in_place_ops(dev):
    need_device(dev)
    p = torch.randn(10, device=dev, requires_grad=True)
    p.grad = torch.randn_like(p)
    opt = torch.optim.Adam([p], lr=0.1)
    opt.step()
    v0 = p._version
    ea = opt.state[p]["exp_avg"]
    e0 = ea._version
    opt.step()
    assert p._version > v0 and ea._version > e0
    # a saved parameter changed by the step is caught by autograd, as with PyTorch's own step
    q = torch.randn(10, device=dev, requires_grad=True)
    q.grad = torch.randn_like(q)
    opt_q = torch.optim.Adam([q], lr=0.1)
    loss = (q * q).sum()
    opt_q.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize(
    "kw",
    [{"capturable": True}, {"lr": torch.tensor(0.01)}, {"foreach": True}],
    ids=["capturable", "tensor_lr", "foreach"],
)
def test_unclaimed_calls_run_pytorchs_loop_and_match(dev, kw):
    need_device(dev)
    before = adam_step.STATS["steps"]
    cpu, ral, oc, orl = _run(dev, torch.optim.AdamW, {"weight_decay": 0.1, **kw}, steps=3)
    assert adam_step.STATS["steps"] == before
    _assert_match(cpu, ral, oc, orl, _tol(torch.float32))


def test_cpu_parameters_are_left_to_pytorch():
    before = adam_step.STATS["steps"]
    p = torch.randn(5, requires_grad=True)
    p.grad = torch.randn(5)
    torch.optim.AdamW([p]).step()
    assert adam_step.STATS["steps"] == before
