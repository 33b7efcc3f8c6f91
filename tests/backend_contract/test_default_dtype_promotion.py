"""Results whose dtype comes from the default dtype (int / int, int + 1.5, bool * 2.5) follow
`torch.set_default_dtype` changes made after earlier calls, as on CPU. PyTorch's
test_div_promotion (test_type_promotion.py, run under float and then double) found that ral
kept float32 after the switch to float64: the router's decisions and the positional fast cache
were keyed by the arguments only, so the first call's result dtype stuck, silently dropping
precision. Both devices, both styles; dtypes exact and values compared with CPU's at rtol=0,
atol=0 (the same integer inputs, one division or addition each)."""

import pytest
import torch
from cpu_outcomes import check_results

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _program(a, b, u):
    return [
        a / b,
        torch.div(a, b),
        torch.true_divide(a, 2),
        torch.div(a, 2.0),
        a + 1.5,
        u * 2.5,
        (a > 0) * 2.5,
        torch.add(a, b, alpha=3),  # integer result: never the default dtype
    ]


def _inputs():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-1000, 1000, (3, 4), generator=g, dtype=torch.int32)
    b = torch.randint(1, 7, (3, 4), generator=g, dtype=torch.int64)
    u = torch.randint(0, 255, (3, 4), generator=g, dtype=torch.uint8)
    return a, b, u


@pytest.fixture
def restore_default_dtype():
    before = torch.get_default_dtype()
    yield
    torch.set_default_dtype(before)


@pytest.mark.parametrize("device", DEVICES)
def test_result_dtype_follows_set_default_dtype(device, restore_default_dtype):
    inputs = _inputs()
    moved = [t.to(device) for t in inputs]
    # float32 first, so the decisions exist when the default changes; then back again
    for default in (torch.float32, torch.float64, torch.float32, torch.float16, torch.float64):
        torch.set_default_dtype(default)
        expected = _program(*inputs)
        assert expected[0].dtype == default
        check_results(_program(*moved), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_result_dtype_follows_set_default_dtype_under_ral_mode(device, restore_default_dtype):
    inputs = _inputs()
    for default in (torch.float32, torch.float64, torch.float32):
        torch.set_default_dtype(default)
        expected = _program(*inputs)
        with torch_fl.ral_mode(device):
            got = _program(*inputs)
        check_results(got, expected)
