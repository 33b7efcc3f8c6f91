"""Conformance against PyTorch's ModuleInfo database (torch.testing._internal.common_modules)
on ral:0 and ral:1, in both styles (`module.to(dev)` with inputs moved, and the CPU module
under ral_mode): forward outputs, input gradients, parameter gradients and buffers of every
CPU sample (training, and eval where they differ) in float32, compared with CPU.

CI runs the first CI_MAX_SAMPLES samples of a stable hash-based 1/CI_ONE_IN of the
(device, module, style) cases; the full sweep
(every case, the CI sample included): .venv/bin/python -m pytest tests/test_module_db.py -m slow
Known failures are strict expected failures with their reasons (module_xfails.py).
"""

from __future__ import annotations

import pytest
import torch
from module_xfails import XFAIL
from sweep_support import DEVICES, check, need_device, sampled

from torch_fl.observe import conformance_modules as M

MODULES = M.select_modules(M.load_module_db())
CI_ONE_IN = 4
# CI checks the first samples of each sampled module (nn.LinearCrossEntropyLoss alone has
# minutes of them on 2 cores); the full sweep checks all.
CI_MAX_SAMPLES = 6


def _cases(ci: bool):
    out = []
    for info in MODULES:
        for dev in DEVICES:
            for style in ("device", "mode"):
                if not ci or sampled(f"{dev}:{info.name}:{style}", CI_ONE_IN):
                    out.append(pytest.param(dev, info, style, id=f"{dev}-{info.name}-{style}"))
    return out


def _check(dev, info, style, full=False):
    need_device(dev)
    cap = None if full else CI_MAX_SAMPLES
    check(
        M.run_module_case(info, torch.float32, dev, style, max_samples=cap),
        XFAIL,
        dev,
        "module_xfails.py",
        capped=not full,
    )


@pytest.mark.parametrize("dev,info,style", _cases(ci=True))
def test_module_db(dev, info, style):
    _check(dev, info, style)


@pytest.mark.slow
@pytest.mark.parametrize("dev,info,style", _cases(ci=False))
def test_module_db_full_sweep(dev, info, style):
    _check(dev, info, style, full=True)
