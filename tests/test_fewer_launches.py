"""Fewer, larger kernels (issue 17 item 3): GPT-2's gelu_new chain fused by the jit tier and
GPT-2's attention as one fused kernel, on every ral device; values and gradients against
PyTorch CPU."""

from __future__ import annotations

import pytest
import torch
from conftest import launch_count
from model_zoo import build, inputs, to
from transformers.activations import NewGELUActivation

import torch_fl

TOL = dict(rtol=1e-5, atol=1e-5)


def _devices():
    return [
        pytest.param(f"ral:{p.devices[0]}", id=p.record.name)
        for p in torch_fl.plugins()
        if p.devices and p.record.name in ("host", "opencl")
    ]


@pytest.mark.parametrize("dev", _devices())
@pytest.mark.parametrize("shape,strided", [((7, 13), False), ((3, 5, 33), True), ((1,), False)], ids=str)
def test_gelu_new_chain_is_one_kernel_and_matches_cpu(dev, shape, strided):
    x = torch.linspace(-6, 6, torch.Size(shape).numel()).reshape(shape)
    if strided:
        x = x.transpose(0, -1)
    act = NewGELUActivation()
    want = act(x)
    xd = x.to(dev)
    if strided:
        xd = torch.empty_strided(x.shape, x.stride(), device=dev).copy_(x)
    with torch.no_grad(), torch_fl.fuse():
        act(xd)  # compiles (or reads the disk cache)
        torch.ral.synchronize(torch.device(dev))
        before = launch_count(torch.device(dev).index)
        got = act(xd)
        torch.ral.synchronize(torch.device(dev))
        n = launch_count(torch.device(dev).index) - before
    torch.testing.assert_close(got.cpu(), want, **TOL)
    assert n == 1, f"gelu_new took {n} launches in a fuse() region (8 aten ops)"


@pytest.mark.parametrize("dev", _devices())
def test_gelu_new_gradient_in_a_fuse_region_matches_cpu(dev):
    x = torch.linspace(-5, 5, 3 * 37).reshape(3, 37)
    act = NewGELUActivation()
    xc = x.clone().requires_grad_(True)
    act(xc).backward(torch.cos(x))
    xd = x.to(dev).requires_grad_(True)
    with torch_fl.fuse():
        y = act(xd)
        y.backward(torch.cos(x).to(dev))
    torch.testing.assert_close(y.detach().cpu(), act(x), **TOL)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **TOL)


def _forward_launches(model, batch, dev, fuse):
    idx = torch.device(dev).index
    with torch.no_grad():
        region = torch_fl.fuse() if fuse else torch.no_grad()
        with region:
            model(**batch)
        torch.ral.synchronize(torch.device(dev))
        before = launch_count(idx)
        with region:
            out = model(**batch)
        torch.ral.synchronize(torch.device(dev))
    return out, launch_count(idx) - before


@pytest.mark.parametrize("dev", _devices())
def test_gpt2_forward_fuses_attention_and_gelu(dev, monkeypatch):
    from torch_fl.dispatch import sdpa_entry

    batch = {k: v for k, v in inputs("gpt2").items() if k != "labels"}
    ref = build("gpt2").eval()
    with torch.no_grad():
        want = ref(**batch).logits
    model = build("gpt2").eval().to(dev)
    batch = to(batch, dev)
    counts = {}
    for name, fuse, math_path in (("math", False, True), ("plain", False, False), ("fused", True, False)):
        with monkeypatch.context() as m:
            if math_path:  # what every call did before the fused attention
                m.setattr(sdpa_entry, "fused_choice", lambda *a: False)
            out, counts[name] = _forward_launches(model, batch, dev, fuse)
        torch.testing.assert_close(out.logits.cpu(), want, rtol=2e-4, atol=2e-4, msg=name)
    n_layer = model.config.n_layer
    # The fused attention saves the math path's ~8 launches per layer, gelu_new's fusion 7 more.
    assert counts["plain"] <= counts["math"] - 7 * n_layer, counts
    assert counts["fused"] <= counts["plain"] - 7 * n_layer, counts


@pytest.mark.parametrize("dev", _devices())
@pytest.mark.parametrize("e", [2.0, 3.0, 2.5, -1.0, 0.5, -0.5, -2.0, 0.0])
def test_fused_pow_matches_cpu_for_special_exponents(dev, e):
    # The jit special-cases the exponents PyTorch's CPU kernel does, the same way.
    x = torch.tensor([-3.5, -1.0, -0.0, 0.0, 0.25, 1.5, 1e20, float("inf"), float("-inf"), float("nan"), 7.0])
    want = torch.pow(x, e) * 2
    with torch.no_grad(), torch_fl.fuse():
        got = torch.pow(x.to(dev), e) * 2
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=0, equal_nan=True)
