"""Regression tests for bugs the database sweeps (op_db, module_db, optim_db) found, each
checked against CPU on every ral device present."""

from __future__ import annotations

import pytest
import torch
from sweep_support import DEVICES, need_device


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int64])
def test_number_minus_tensor(dev, dtype):
    # `1 - t` reaches aten.sub with a Python number in its first Tensor slot; the vendor tier
    # took that number for the probe tensor (AttributeError on ral:1 float64, found by LBFGS).
    need_device(dev)
    for t in (torch.tensor(0.5, dtype=torch.float64).to(dtype), torch.tensor([0.5, 3.0]).to(dtype)):
        torch.testing.assert_close((1 - t.to(dev)).cpu(), 1 - t)
        torch.testing.assert_close(torch.rsub(t.to(dev), 2).cpu(), torch.rsub(t, 2))


@pytest.mark.parametrize("dev", DEVICES)
def test_layer_norm_backward_without_affine(dev):
    # native_layer_norm_backward returns None for the weight/bias grads it was not asked for;
    # the vendor tier took every output for a tensor (AttributeError, found by module_db).
    need_device(dev)
    x = torch.randn(3, 5)
    g = torch.rand(3, 5)
    xd = x.to(dev).requires_grad_()
    x.requires_grad_()
    (torch.nn.functional.layer_norm(x, (5,)) * g).sum().backward()
    (torch.nn.functional.layer_norm(xd, (5,)) * g.to(dev)).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", ["device", "mode"])
def test_scatter_into_0d_tensor(dev, style):
    # OpenCL's scatter returned early for a 0-d index, leaving the result equal to `self`
    # (op_db scatter int64 on ral:1, once listed as flaky: the samples' random self and src
    # are sometimes equal). self != src here, so an unchanged result cannot pass; repeated
    # because the report was of an intermittent failure.
    need_device(dev)
    from torch_fl.mode import ral_mode

    i = torch.tensor(0)
    for dtype in (torch.int64, torch.float32):
        s, src = torch.tensor(3, dtype=dtype), torch.tensor(-5, dtype=dtype)
        calls = {
            "src": lambda s_, i_, r_: torch.scatter(s_, 0, i_, r_),
            "add": lambda s_, i_, r_: torch.scatter_add(s_, 0, i_, r_),
            "reduce": lambda s_, i_, r_: torch.scatter(s_, 0, i_, r_, reduce="add"),
            "value": lambda s_, i_, r_: torch.scatter(s_, 0, i_, 7),
            "gather": lambda s_, i_, r_: torch.gather(r_, 0, i_),
        }
        for _ in range(20):
            for name, f in calls.items():
                expected = f(s, i, src)
                if style == "mode":
                    with ral_mode(dev):
                        actual = f(s, i, src)
                else:
                    actual = f(s.to(dev), i.to(dev), src.to(dev)).cpu()
                assert torch.equal(actual, expected), (name, dtype, actual, expected)


@pytest.mark.parametrize("dev", DEVICES)
def test_sparse_cpu_tensors_stay_cpu_under_mode(dev):
    # op_db's sparse entries under ral_mode: to_sparse of a CPU tensor reached the device
    # ("unsupported memory format option Contiguous") and a sparse CPU operand was uploaded
    # ("Cannot access data pointer"). ral devices refuse sparse layouts; under the mode a CPU
    # tensor's sparse forms and the ops on them stay CPU, as without the mode.
    need_device(dev)
    from torch_fl.mode import ral_mode

    a = torch.randn(4, 4) * (torch.rand(4, 4) > 0.5)
    b = torch.randn(4, 3)
    expected = (torch.sparse.mm(a.to_sparse(), b), a.to_sparse_csr().to_dense(), (a.to_sparse() * 2).to_dense())
    with ral_mode(dev):
        sp = a.to_sparse()
        assert sp.device.type == "cpu" and sp.layout == torch.sparse_coo
        actual = (torch.sparse.mm(sp, b), a.to_sparse_csr().to_dense(), (sp * 2).to_dense())
    for x, y in zip(actual, expected):
        torch.testing.assert_close(x.cpu(), y)


@pytest.mark.parametrize("dev", DEVICES)
def test_sparse_work_under_mode_takes_device_results_home(dev):
    # PyTorch's test_masked.py (sparse masks) under ral_mode: a sparse CPU operand met a
    # result the mode had made on the device ("Expected all tensors to be on the same
    # device"), and to_sparse of such a result reached the cpu tier ("Cannot access data
    # pointer"). Such ops run on CPU with the device operands brought home, through autograd
    # where it records, so a graph layer with a sparse adjacency trains as without the mode.
    need_device(dev)
    from torch_fl.mode import ral_mode

    torch.manual_seed(0)
    x = torch.randn(3, 4)
    mask = (torch.rand(3, 4) > 0.4).to_sparse()
    adj = ((torch.rand(6, 6) > 0.6).float() * torch.rand(6, 6)).to_sparse()
    lin, feats = torch.nn.Linear(4, 3), torch.randn(6, 4)

    def run():
        lin.zero_grad()
        h = torch.sparse.mm(adj, lin(feats))
        (h.relu() * torch.arange(1.0, 4.0)).sum().backward()
        dense = lin(feats) * 2  # a device result under the mode
        return (
            torch.masked.sum(x, mask=mask),
            torch.masked.amax(x, 1, mask=mask),
            h.detach(),
            lin.weight.grad.clone(),
            lin.bias.grad.clone(),
            dense.to_sparse().to_dense(),
            torch.sparse.mm(adj, dense).sum(0),
        )

    expected = run()
    with ral_mode(dev):
        actual = run()
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    with ral_mode(dev):
        sp = (lin(feats) * 2).to_sparse()
    assert sp.device.type == "cpu" and sp.layout == torch.sparse_coo
