"""Integer Scalars converted to an integer tensor's dtype (clamp's bounds) behave as on CPU,
on ral:0 and ral:1 in both styles: a value that overflows the dtype raises RuntimeError
(CPU: "value cannot be converted to type uint8_t without overflow"), a negative bound on an
unsigned dtype wraps (uint8: -3 is 253), and the device keeps working after the refusal.
Integer results compare exactly."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
BOUNDS = [
    (-3, 100),
    (None, -1),
    (-255, None),
    (-128, None),
    (3, 3),
    (2, 300),
    (-300, None),
    (-129, None),
    (None, 2**31),
]
OPS = {
    "clamp": lambda x, lo, hi: torch.clamp(x, lo, hi),
    "clamp_": lambda x, lo, hi: x.clone().clamp_(lo, hi),
    "clamp_min": lambda x, lo, hi: torch.clamp_min(x, lo if lo is not None else hi),
}


def _cpu(fn, x, lo, hi):
    """CPU's result, or CPU's refusal message."""
    try:
        return fn(x, lo, hi)
    except RuntimeError as e:
        assert "without overflow" in str(e)
        return str(e)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("style", ["to_dev", "mode"])
@pytest.mark.parametrize("op", OPS)
def test_clamp_bounds_convert_as_on_cpu(device, style, op):
    fn = OPS[op]
    checked = refused = 0
    for dtype in DTYPES:
        x = torch.tensor([0, 5, 100, 127], dtype=dtype)
        for lo, hi in BOUNDS:
            want = _cpu(fn, x, lo, hi)
            try:
                if style == "mode":
                    with torch_fl.ral_mode(device):
                        got = fn(x, lo, hi)
                else:
                    got = fn(x.to(device), lo, hi).cpu()
            except RuntimeError as e:
                assert isinstance(want, str), f"{dtype} {lo} {hi}: CPU gives {want}, ral raised {e}"
                assert str(e) == want  # CPU's message ("value cannot be converted to type uint8_t ...")
                refused += 1
                continue
            assert not isinstance(want, str), f"{dtype} {lo} {hi}: CPU raises, ral gave {got}"
            assert got.dtype == want.dtype and torch.equal(got.cpu(), want), (dtype, lo, hi, got, want)
            checked += 1
    assert checked > 20 and refused > 5  # both kinds of case were exercised
    y = torch.arange(4, dtype=torch.uint8)
    assert torch.equal(torch.clamp(y.to(device), 1, 2).cpu(), torch.clamp(y, 1, 2))  # still works
