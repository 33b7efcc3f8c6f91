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
