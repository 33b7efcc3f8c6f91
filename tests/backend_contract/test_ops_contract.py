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


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_names_what_ral_lacks_and_the_tensor_keeps_working(device):
    """ral carries no quantized dtypes (nor does this torch keep them for long: it warns they
    are deprecated). Quantizing a ral tensor says so, with PyTorch's exception type for a
    backend that lacks an op, rather than a copy error; the tensor stays usable."""
    x = torch.randn(3, 4)
    xd = x.to(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's deprecation of quantized dtypes
        with pytest.raises(NotImplementedError, match=r"quantize_per_tensor: ral devices do not carry quantized"):
            torch.quantize_per_tensor(xd, 0.1, 10, torch.qint8)
    torch.testing.assert_close((xd * 2 + 1).cpu(), x * 2 + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_under_ral_mode_stays_cpu_state_as_without_the_mode(device):
    """Under ral_mode a quantized result is CPU state, as without the mode, even when its
    operands (per-channel scales) were computed on the device; dequantize gives CPU's values."""
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        want = torch.quantize_per_tensor(x, 0.1, 10, torch.qint8)
        want_c = torch.quantize_per_channel(x, torch.ones(3) * 0.1, torch.zeros(3, dtype=torch.long), 0, torch.quint8)
        with torch_fl.ral_mode(device):
            got = torch.quantize_per_tensor(x, 0.1, 10, torch.qint8)
            got_c = torch.quantize_per_channel(
                x, torch.ones(3) * 0.1, torch.zeros(3, dtype=torch.long), 0, torch.quint8
            )
            back = got.dequantize()
            y = (x * 2).sum()
    assert got.device.type == "cpu" and got.dtype == torch.qint8 and got_c.dtype == torch.quint8
    torch.testing.assert_close(back, want.dequantize(), rtol=0, atol=0)
    torch.testing.assert_close(got_c.dequantize(), want_c.dequantize(), rtol=0, atol=0)
    assert y.device == torch.device(device)
    torch.testing.assert_close(y.cpu(), (x * 2).sum())
