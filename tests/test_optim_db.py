"""Conformance against PyTorch's OptimizerInfo database (torch.testing._internal.common_optimizers)
on ral:0 and ral:1, in both styles (parameters on the device, and CPU parameters stepped under
ral_mode): every optimizer input in its for-loop, foreach and fused variants where CPU
supports them takes several steps; parameters and optimizer state must equal CPU's.

CI runs a stable hash-based 1/CI_ONE_IN of the cases; the full sweep (every case, the CI
sample included): .venv/bin/python -m pytest tests/test_optim_db.py -m slow
Known failures are strict expected failures with their reasons (optim_xfails.py).
"""

from __future__ import annotations

import pytest
from optim_xfails import XFAIL
from sweep_support import DEVICES, check, need_device, sampled

from torch_fl.observe import conformance_optim as O

CASES = [(info, oi, impl, cid) for info in O.load_optim_db() for cid, oi, impl in O.case_names(info)]
CI_ONE_IN = 3


def _cases(ci: bool):
    out = []
    for info, oi, impl, cid in CASES:
        for dev in DEVICES:
            for style in ("device", "mode"):
                if not ci or sampled(f"{dev}:{cid}:{style}", CI_ONE_IN):
                    out.append(pytest.param(dev, info, oi, impl, style, id=f"{dev}-{cid}-{style}"))
    return out


def _check(dev, info, oi, impl, style):
    need_device(dev)
    check(O.run_optim_case(info, oi, impl, dev, style), XFAIL, dev, "optim_xfails.py")


@pytest.mark.parametrize("dev,info,oi,impl,style", _cases(ci=True))
def test_optim_db(dev, info, oi, impl, style):
    _check(dev, info, oi, impl, style)


@pytest.mark.slow
@pytest.mark.parametrize("dev,info,oi,impl,style", _cases(ci=False))
def test_optim_db_full_sweep(dev, info, oi, impl, style):
    _check(dev, info, oi, impl, style)
