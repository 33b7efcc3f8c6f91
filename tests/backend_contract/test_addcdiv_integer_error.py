"""addcdiv with integer (or bool) tensor1 and tensor2 raises CPU's RuntimeError with CPU's
message, functional, in-place and out=. PyTorch's test_integer_addcdiv_deprecated
(test_type_promotion.py) found ral's message printed as a Python tuple ("('Integer division
with addcdiv is no longer supported, and in a future ', ...)"): the call reached PyTorch's
meta function, whose message lambda returns a tuple. Mixed integer/float operands still run and
match CPU. Both devices, both styles."""

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


def _calls(dev, dtype):
    i = torch.tensor([1, 1, 0], device=dev).to(dtype)
    f = torch.tensor([0.5, 1.5, 2.5], device=dev)
    nonzero = i.int() + 1
    return [
        lambda: torch.addcdiv(f, i, i),
        lambda: torch.addcdiv(i, i, i),
        lambda: f.clone().addcdiv_(i, i, value=2),
        lambda: torch.addcdiv(f, i, i, out=torch.empty(3, device=dev)),
        lambda: torch.addcdiv(f, f, nonzero),  # runs
        lambda: torch.addcdiv(f, i.to(f.dtype), f, value=3),  # runs
    ]


def _outcomes(dev):
    return [o for dtype in DTYPES for o in outcomes(_calls(dev, dtype))]


@pytest.mark.parametrize("device", DEVICES)
def test_integer_addcdiv_raises_as_cpu(device):
    expected = _outcomes("cpu")
    assert sum(k is RuntimeError for k, _ in expected) == 4 * len(DTYPES)
    check_outcomes(_outcomes(device), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_integer_addcdiv_under_ral_mode(device):
    expected = _outcomes("cpu")
    with torch_fl.ral_mode(device):
        got = _outcomes("cpu")
    check_outcomes(got, expected, rtol=1e-6, atol=1e-6)
