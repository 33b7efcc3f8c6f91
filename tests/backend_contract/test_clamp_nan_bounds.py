"""`clamp`/`clip`/`clamp_min`/`clamp_max` with a NaN bound give NaN everywhere, as on CPU:
PyTorch's test_clamp_scalar_nan_bounds found that both vendor kernels (host and OpenCL)
compared against the NaN bound and returned x unchanged, with no error. Every overload
(functional, in-place, out=, one or both bounds, a NaN input element, integer inputs), on
both devices, in both styles; compared with CPU exactly, NaNs matching NaNs (rtol=0, atol=0,
equal_nan)."""

import pytest
import torch
from cpu_outcomes import check_results

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
NAN = float("nan")


def _program(x):
    out = torch.empty_like(x)
    ints = (x * 10).to(torch.int64)
    return [
        torch.clamp(x, None, NAN),
        torch.clamp(x, NAN, None),
        torch.clamp(x, 0.0, NAN),
        torch.clamp(x, NAN, 1.0),
        torch.clip(x, min=NAN),
        x.clamp_min(NAN),
        x.clamp_max(NAN),
        torch.clamp_min(x, min=NAN),  # keyword bounds of the one-bound overloads
        x.clamp_max(max=NAN),
        x.clone().clamp_(max=NAN),
        x.clone().clamp_min_(NAN),
        torch.clamp(x, max=NAN, out=out),
        torch.clamp(ints, 0, NAN),  # promotes to the default dtype, as a Python float does
        torch.clamp(x, 0.2, 0.7),  # finite bounds: unchanged path
        torch.clamp(ints, 2, 5),
    ]


def _input():
    x = torch.rand(4, 5, generator=torch.Generator().manual_seed(0))
    x[1, 2] = NAN
    return x


@pytest.mark.parametrize("device", DEVICES)
def test_nan_bounds_give_nan_as_on_cpu(device):
    x = _input()
    got = _program(x.to(device))
    assert all(g.device == torch.device(device) for g in got)
    check_results(got, _program(x), equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_bounds_under_ral_mode_match_cpu(device):
    x = _input()
    expected = _program(x)
    with torch_fl.ral_mode(device):
        got = _program(x)
    check_results(got, expected, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_float16_and_strided_inputs_with_nan_bounds(device):
    x = _input().to(torch.float16).t()
    check_results(_program(x.to(device)), _program(x), equal_nan=True)
