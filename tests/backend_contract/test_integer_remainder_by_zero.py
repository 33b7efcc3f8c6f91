"""Integer `remainder` by zero raises CPU's RuntimeError("ZeroDivisionError"), eager in both
styles and compiled: the OpenCL kernel returned 0 for it (a silent wrong value on ral:1, eager
and under both compile backends, which call the same kernel). Scalar divisors are checked per
call (dispatch/value_checks.py); integer Tensor divisors run where CPU's check runs
(manifests/opencl.json lists remainder.Tensor for floating dtypes only). Non-zero divisors,
negative operands and float zeros (NaN) still match CPU."""

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl
import torch_fl.jit.compile_backend  # noqa: F401 (backend="ral")

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _calls(dev):
    a = torch.tensor([5, -3, 1, -8], device=dev)
    zero_at_1 = torch.tensor([2, 0, 3, -3], device=dev)
    nonzero = torch.tensor([2, -4, 3, 5], device=dev)
    calls = [
        lambda: a % 0,
        lambda: torch.remainder(a, 0),
        lambda: torch.remainder(a, False),
        lambda: a.clone().remainder_(0),
        lambda: torch.remainder(a, 0, out=torch.empty_like(a)),
        lambda: a % zero_at_1,
        lambda: a.clone().remainder_(zero_at_1),
        lambda: torch.remainder(7, zero_at_1),
        lambda: (a > 0) % 0,
        lambda: a.to(torch.uint8) % zero_at_1.abs().to(torch.uint8),
        lambda: a % 3,
        lambda: a % -3,
        lambda: a % nonzero,
        lambda: a.to(torch.int16) % nonzero.to(torch.int16),
        lambda: a.float() % 0,
        lambda: a.float() % zero_at_1,
    ]
    return calls


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_integer_remainder_by_zero_raises_as_cpu(device, style):
    expected = outcomes(_calls("cpu"))
    assert sum(k is RuntimeError for k, _ in expected) == 10
    if style == "to":
        got = outcomes(_calls(device))
    else:
        with torch_fl.ral_mode(device):
            got = outcomes(_calls("cpu"))
    check_outcomes(got, expected)


@pytest.mark.parametrize("backend", ["ral", "inductor"])
def test_compiled_integer_remainder_by_zero_raises_on_ral1(backend):
    if torch.ral.device_count() < 2:
        pytest.skip("needs ral:1 (the OpenCL plugin), whose kernel returned 0")
    f = torch.compile(lambda x, y: (x % y) * 2 + 1, backend=backend)
    x = torch.tensor([5, -3, 1, 7])
    good, bad = torch.tensor([2, 4, -3, 5]), torch.tensor([2, 0, 3, 0])
    got = f(x.to("ral:1"), good.to("ral:1"))
    torch.testing.assert_close(got.cpu(), (x % good) * 2 + 1, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(x.to("ral:1"), bad.to("ral:1")).cpu()
