"""Conformance of PyTorch's reference implementations (python_ref_db: torch._refs built on
torch._prims, what PyTorch's test_ops.py and test_unary/binary_ufuncs.py run on every device)
on ral:0 and ral:1 against CPU, float32, device style (the refs take tensors; under ral_mode
a CPU program does not call them).

A ref reaches ral through prims ops, which op_db never calls: this sweep found prims.real/
imag/conj read with the strides of a fresh tensor (every value wrong, silently), and
prims.copy_to and the functional aten.copy refusing operands on two devices where copy_
takes them. CI runs the first 2 samples of each entry; every sample:
    .venv/bin/python -m pytest tests/test_opinfo_refs.py -m slow
"""

from __future__ import annotations

import pytest
import torch
from opinfo_xfails import REF_XFAIL
from sweep_support import DEVICES, check, need_device

from torch_fl.observe import conformance as C

REFS = [op for op in C.load_python_ref_db() if torch.float32 in op.supported_dtypes("cpu")]
CASES = [pytest.param(dev, op, id=f"{dev}-{C.opinfo_name(op)}") for op in REFS for dev in DEVICES]


@pytest.mark.parametrize("dev,op", CASES)
def test_python_refs(dev, op):
    need_device(dev)
    check(C.run_case(op, torch.float32, dev, "device", max_samples=2), REF_XFAIL, dev, "opinfo_xfails.py", capped=True)


@pytest.mark.slow
@pytest.mark.parametrize("dev,op", CASES)
def test_python_refs_every_sample(dev, op):
    need_device(dev)
    check(C.run_case(op, torch.float32, dev, "device"), REF_XFAIL, dev, "opinfo_xfails.py")
