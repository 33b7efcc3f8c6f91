"""A Python int too large for a narrow integer tensor's dtype wraps as on CPU, where ATen
converts the wrapped number with a C cast: uint8 [0, 7, 255] + 1000 is [232, 239, 231].
PyTorch's test_from_issue (test_type_promotion.py, `(u + 1000).dtype`) found ral raising
"value cannot be converted to type uint8_t without overflow": the vendor tier built the scalar
operand with torch.full(..., dtype=uint8), which checks the range. Eight dtypes/ops, both
devices, both styles, exact against CPU."""

import pytest
import torch
from cpu_outcomes import check_results

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _program(dev):
    u = torch.tensor([0, 7, 255], dtype=torch.uint8, device=dev)
    i8 = torch.tensor([0, -7, 127], dtype=torch.int8, device=dev)
    i16 = torch.tensor([0, -7, 32767], dtype=torch.int16, device=dev)
    i32 = torch.tensor([0, -7, 2**31 - 1], dtype=torch.int32, device=dev)
    return [
        u + 1000,
        1000 + u,
        u - 1000,
        u * 300,
        u + (-1),
        i8 + 200,
        i8 * 1000,
        i16 + 70000,
        i32 + 2**40,
        i32 * 2**33,
        torch.add(u, 1000, alpha=3),
        u.clone().add_(1000),
        u[::2] + 1000,  # strided
        u + 3,  # in range: unchanged path
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_out_of_range_int_scalar_wraps_as_cpu(device):
    check_results(_program(device), _program("cpu"))


@pytest.mark.parametrize("device", DEVICES)
def test_out_of_range_int_scalar_wraps_under_ral_mode(device):
    expected = _program("cpu")
    with torch_fl.ral_mode(device):
        got = _program("cpu")
    check_results(got, expected)
