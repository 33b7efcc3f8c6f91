"""Ops on ral tensors as OpenReg's test_ops.py exercises them, held to CPU's results: an out=
view the op must resize keeps aliasing its base, as CPU's resize_ keeps the storage where the
new size fits. On ral:0 and ral:1, with `.to()` and under `ral_mode`."""

import warnings

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]

# (base shape, view of the base given as out=, op); the op's result has more elements than the
# view, so CPU resizes the view in place (deprecated, warned, still allowed) and writes its
# storage from the view's offset on.
_CASES = {
    "abs into every third column": ((2, 2, 6), lambda b: b[:, :, ::3], lambda x, out: torch.abs(x, out=out)),
    "neg into an offset slice": ((3, 8), lambda b: b[1:, 2:4], lambda x, out: torch.neg(x, out=out)),
    "add into a flat prefix": ((20,), lambda b: b[2:8], lambda x, out: torch.add(x, 1, out=out)),
}


def _run(case, x, base):
    shape, view, op = _CASES[case]
    out = view(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "An output with one or more elements was resized"
        op(x, out)
    out.mul_(3)  # a write through the resized view must reach the base, as on CPU
    return out


@pytest.mark.parametrize("case", list(_CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_resized_out_view_keeps_aliasing_its_base(device, case):
    torch.manual_seed(0)
    x = torch.randn(2, 2, 3)
    base = torch.randn(_CASES[case][0])
    want_base = base.clone()
    want_out = _run(case, x, want_base)

    dev_base = base.to(device)
    got_out = _run(case, x.to(device), dev_base)
    assert got_out.shape == want_out.shape and got_out.stride() == want_out.stride()
    assert got_out.storage_offset() == want_out.storage_offset()
    torch.testing.assert_close(got_out.cpu(), want_out, rtol=0, atol=0)
    torch.testing.assert_close(dev_base.cpu(), want_base, rtol=0, atol=0)

    mode_base = base.clone()
    with torch_fl.ral_mode(device):
        mode_out = _run(case, x, mode_base)
    torch.testing.assert_close(mode_out.cpu(), want_out, rtol=0, atol=0)
    torch.testing.assert_close(mode_base.cpu(), want_base, rtol=0, atol=0)
