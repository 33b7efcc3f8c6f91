"""Conformance against PyTorch's OpInfo database (torch.testing._internal op_db) on ral:0
and ral:1, in float32, float16 (where the device declares it), bfloat16, int64, bool, float64 and
complex64, in both styles (tensors moved to the device, and CPU samples under ral_mode),
against CPU.

CI runs every float32 entry on ral:0 plus a stable hash-based sample of the rest (1/RAL0_ONE_IN
of the other dtypes on ral:0, 1/RAL1_ONE_IN of every dtype on ral:1; supersets of the earlier
1/12 and 1/32 samples, affordable since the sweep seeds and draws samples without torch's
per-call overheads, conformance.samples_of). The full sweep (every case,
the CI sample included):
    .venv/bin/python -m pytest tests/test_opinfo.py -m slow
Every known failure is a strict expected failure with its reason (opinfo_xfails.py): a
failure that gets fixed fails the suite, which keeps the list true.
"""

from __future__ import annotations

import pytest
from opinfo_xfails import XFAIL
from sweep_support import DEVICES, check, need_device, sampled

from torch_fl.observe import conformance as C

OP_DB = C.load_op_db()
DTYPES = ("float32", "float16", "bfloat16", "int64", "bool", "float64", "complex64")
# ral:1 (OpenCL on PoCL) costs several times ral:0 per case: CI samples 1 in this many.
RAL1_ONE_IN = 8
RAL0_ONE_IN = 4  # ral:0, dtypes other than float32


def _in_ci(dev: str, name: str, dtype: str) -> bool:
    if dev == "ral:0":
        return dtype == "float32" or sampled(f"{name}:{dtype}", RAL0_ONE_IN)
    return sampled(f"{dev}:{name}:{dtype}", RAL1_ONE_IN)


def _cases(ci: bool):
    """pytest params for (device, op, dtype): the CI sample, or (ci=False) everything."""
    out = []
    for op, dt in C.select(OP_DB, dtypes=DTYPES):
        name = C.opinfo_name(op)
        dname = str(dt).replace("torch.", "")
        for dev in DEVICES:
            if not ci or _in_ci(dev, name, dname):
                out.append(pytest.param(dev, op, dt, id=f"{dev}-{name}-{dname}"))
    return out


def _check(dev, op, dtype, style, full=False):
    need_device(dev)
    if not C.device_declares(dev, dtype) and str(dtype) == "torch.float16":
        pytest.skip(f"{dev} does not declare float16 in its dtype_mask (the OpenCL plugin on PoCL)")
    cap = None if full or C.opinfo_name(op) not in C.SLOW_OPS else 8
    check(C.run_case(op, dtype, dev, style, max_samples=cap), XFAIL, dev, "opinfo_xfails.py", capped=cap is not None)


@pytest.mark.parametrize("dev,op,dtype", _cases(ci=True))
@pytest.mark.parametrize("style", ["device", "mode"])
def test_opinfo(dev, op, dtype, style):
    _check(dev, op, dtype, style)


@pytest.mark.slow
@pytest.mark.parametrize("dev,op,dtype", _cases(ci=False))
@pytest.mark.parametrize("style", ["device", "mode"])
def test_opinfo_full_sweep(dev, op, dtype, style):
    _check(dev, op, dtype, style, full=True)
