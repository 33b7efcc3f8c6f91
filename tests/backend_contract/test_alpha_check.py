"""add/sub/rsub refuse an `alpha` the operands' dtype cannot take with CPU's RuntimeError and
message: a float alpha for integer or bool operands ("For integral input tensors, argument
alpha must not be a floating point number."), a bool alpha for a non-bool result, a complex
alpha for real operands. PyTorch's test_alpha_mismatch (test_type_promotion.py) found ral
raising ValueError ("alpha argument of type <class 'float'> cannot be safely cast to type
<class 'int'>!") from torch._refs.add, the meta path the router plans with. Every call, both
devices, both styles: the same exception type and message as CPU, or the same values."""

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _calls(d):
    i = torch.tensor([1, 2, 3, 4], dtype=torch.int32, device=d)
    b = torch.tensor([True, False, True, False], device=d)
    f = torch.tensor([0.5, 1.0, 1.5, 2.0], device=d)
    return [
        lambda: torch.add(i, i, alpha=1.1),
        lambda: torch.add(b, b, alpha=1.1),
        lambda: torch.add(i, i, alpha=True),
        lambda: torch.sub(i, i, alpha=1.5),
        lambda: i.clone().add_(i, alpha=2.5),
        lambda: torch.add(f, f, alpha=1j),
        lambda: torch.add(i, 2, alpha=0.5),
        lambda: torch.rsub(i, i, alpha=0.5),
        lambda: torch.add(i, i, alpha=1.5, out=torch.empty(4, device=d)),
        lambda: torch.add(i, f, alpha=0.5),  # float result: allowed
        lambda: torch.add(f, f, alpha=0.5),
        lambda: torch.add(i, i, alpha=3),
        lambda: torch.add(b, b, alpha=True),
    ]


def _outcomes(d):
    return outcomes(_calls(d))


@pytest.mark.parametrize("device", DEVICES)
def test_alpha_check_raises_as_cpu(device):
    expected = _outcomes("cpu")
    assert sum(k is RuntimeError for k, _ in expected) == 9
    check_outcomes(_outcomes(device), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_alpha_check_under_ral_mode(device):
    expected = _outcomes("cpu")
    with torch_fl.ral_mode(device):
        got = _outcomes("cpu")
    check_outcomes(got, expected)
