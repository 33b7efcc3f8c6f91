"""Reductions without an identity (amax, amin, max.dim, min.dim, argmax, argmin) over a
zero-size dim raise CPU's IndexError ("amax(): Expected reduction dim 1 to have non-zero
size."), and over all dims of an empty tensor CPU's error ("Expected reduction dim to be
specified for input.numel() == 0"). PyTorch's test_empty_tensor_empty_slice and
test_tensor_compare_ops_empty (test_reductions.py) found ral raising RuntimeError from the meta
functions ("reducing over zero-size dimension for reduction operation without identity",
"argmax: ..." for argmin too), and max.dim/min.dim reaching the host kernel
(RAL_ERROR_INVALID_ARGUMENT). Four shapes (empty and not), every dim choice, both devices, both
styles: the same exception type and message as CPU, or the same result."""

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
SHAPES = ((2, 0, 4), (0, 2, 3), (2, 3), (0,))


def _calls(x):
    calls = []
    for op in ("amax", "amin"):
        f = getattr(torch, op)
        calls += [lambda f=f, d=d: f(x, dim=d) for d in (0, 1, -2, (1, 2), (0, 2), [], (-1,))]
        calls.append(lambda f=f: f(x))
    for op in ("max", "min", "argmax", "argmin"):
        f = getattr(torch, op)
        calls += [lambda f=f, d=d: _first(f(x, dim=d, keepdim=True)) for d in (0, 1, -2, -1)]
    calls += [lambda: torch.argmax(x), lambda: torch.argmin(x)]
    return calls


def _first(result):
    return result[0] if isinstance(result, tuple) else result


def _outcomes(dev):
    return [
        o
        for shape in SHAPES
        for o in outcomes(_calls(torch.arange(float(torch.Size(shape).numel())).reshape(shape).to(dev)))
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_empty_reductions_raise_as_cpu(device):
    expected = _outcomes("cpu")
    assert sum(k is IndexError for k, _ in expected) > 20
    check_outcomes(_outcomes(device), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_reductions_under_ral_mode(device):
    expected = _outcomes("cpu")
    with torch_fl.ral_mode(device):
        got = _outcomes("cpu")
    check_outcomes(got, expected)
