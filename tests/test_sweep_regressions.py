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
