"""Gradients against PyTorch's OpInfo database: every differentiable op_db entry, float32, on
ral:0 and ral:1, both styles (tensors moved to the device, and CPU tensors under ral_mode),
against CPU autograd (conformance.run_grad_case: unequal weights on every differentiable
output, so a gradient sent to the wrong element shows; tolerance GRAD_TOLERANCE).

test_opinfo.py compares forward results only; this sweep found what it could not see: the
backward of every norm (norm, linalg.norm, normalize, cosine_similarity, pairwise_distance,
dist, renorm, triplet losses) failed on both devices, because masked_fill_ with a broadcast
mask (their backward's zero-norm guard) was not treated as broadcasting (PyTorch tags
masked_fill but not masked_fill_ as pointwise), and sgn's backward needed
aten::_efficientzerotensor, which had no ral kernel.

CI runs the first 3 samples of every entry (about 30 s); every sample:
    .venv/bin/python -m pytest tests/test_opinfo_grad.py -m slow
"""

from __future__ import annotations

import pytest
import torch
from opinfo_xfails import XFAIL
from sweep_support import DEVICES, check, need_device

from torch_fl.observe import conformance as C

OP_DB = [op for op in C.load_op_db() if op.supports_autograd and torch.float32 in op.supported_dtypes("cpu")]
CASES = [pytest.param(dev, op, id=f"{dev}-{C.opinfo_name(op)}") for op in OP_DB for dev in DEVICES]


def _check(dev, op, style, max_samples):
    need_device(dev)
    result = C.run_grad_case(op, torch.float32, dev, style, max_samples=max_samples)
    check(result, XFAIL, dev, "opinfo_xfails.py", capped=max_samples is not None)


@pytest.mark.parametrize("dev,op", CASES)
@pytest.mark.parametrize("style", ["device", "mode"])
def test_opinfo_gradients(dev, op, style):
    _check(dev, op, style, 3)


@pytest.mark.slow
@pytest.mark.parametrize("dev,op", CASES)
@pytest.mark.parametrize("style", ["device", "mode"])
def test_opinfo_gradients_every_sample(dev, op, style):
    _check(dev, op, style, None)
