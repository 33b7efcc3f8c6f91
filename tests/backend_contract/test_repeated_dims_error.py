"""A reduction given the same dim twice (`x.sum(dim=(0, -4))` on a 4-d tensor) raises CPU's
RuntimeError "dim 0 appears multiple times in the list of dims". PyTorch's test_repeated_dim
(test_reductions.py) found sum, mean, var, amax and amin on ral raising the meta path's
"duplicate value in the list of dims". Twelve reductions, repeated, distinct and out-of-range
dim lists, an empty input, both devices, both styles: CPU's exception and message, or CPU's
result."""

import warnings

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
OPS = (torch.mean, torch.sum, torch.nansum, torch.std, torch.logsumexp, torch.var, torch.norm, torch.amax, torch.amin)
DIMS = ((0, 0), (0, -4), (1, 2, -3), (0, 1), (0, 5), (-1,))


def _calls(x):
    return [lambda op=op, d=d: op(x, dim=d) for op in OPS for d in DIMS]


def _outcomes(dev):
    g = torch.Generator().manual_seed(0)
    inputs = (torch.randn(3, 3, 3, 3, generator=g), torch.randn(2, 0, 3, 1, generator=g))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [o for x in inputs for o in outcomes(_calls(x.to(dev)))]


@pytest.mark.parametrize("device", DEVICES)
def test_repeated_dims_raise_as_cpu(device):
    expected = _outcomes("cpu")
    assert sum("appears multiple times" in str(v) for _, v in expected) >= 3 * len(OPS)
    check_outcomes(_outcomes(device), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_repeated_dims_under_ral_mode(device):
    expected = _outcomes("cpu")
    with torch_fl.ral_mode(device):
        got = _outcomes("cpu")
    check_outcomes(got, expected, rtol=1e-5, atol=1e-6)
