"""var/std (and var_mean/std_mean) with a correction at or past the number of reduced elements
give inf (NaN where the squares sum to 0), as on CPU, which divides by max(0, N - correction).
PyTorch's test_var_correction_vs_numpy and test_var_mean_correction (test_reductions.py) found
the host plugin's var kernel dividing by N - correction itself: correction=30 over 20 elements
returned a negative variance (-1.33) where CPU gives inf, and std of it NaN. float32 and
float64, corrections from -100 to 400, every dim choice, both devices, both styles, against CPU
at rtol 1e-5 with NaN equal NaN and inf equal inf."""

import warnings

import pytest
import torch
from cpu_outcomes import check_results

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
CORRECTIONS = (None, 0, 1, 10, 19, 20, 21, 30, 400, -100, True)


def _program(x):
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU warns when the degrees of freedom are <= 0
        for corr in CORRECTIONS:
            for dim in (None, 0, 1, (0, 1)):
                out.append(torch.var(x, dim=dim, correction=corr))
                out.append(torch.std(x, dim=dim, correction=corr, keepdim=True))
                out.extend(torch.var_mean(x, dim=dim, correction=corr))
        out.append(torch.var(torch.ones_like(x), dim=0, correction=30))  # 0 / 0
    return out


def _input(dtype):
    return torch.randn(20, 20, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64), ids=str)
def test_var_with_correction_past_n_matches_cpu(device, dtype):
    x = _input(dtype)
    expected = _program(x)
    assert any(e.isinf().any() for e in expected)  # the inputs reach the max(0, ...) case
    check_results(_program(x.to(device)), expected, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_var_with_correction_past_n_under_ral_mode(device):
    x = _input(torch.float32)
    expected = _program(x)
    with torch_fl.ral_mode(device):
        got = _program(x)
    check_results(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
