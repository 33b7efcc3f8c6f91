"""An in-place or out= element-wise op computes in its operands' promoted dtype, then casts to
the tensor it writes, or raises where ATen forbids that cast. PyTorch's
test_computation_ignores_out and test_inplace (test_type_promotion.py) found that ral computed
in the written dtype instead: uint8 5 - 8 into a float64 out= gave -3.0 (CPU: 253.0), float16
33000 + 33000 into float64 gave 66000.0 (CPU: inf), and int32.add_(1.5) / int32.mul_(1.5)
wrote 2 and 1 where CPU raises "result type Float can't be cast to the desired output type
Int". The vendor and jit tiers now leave such calls to the cpu tier. Both devices, both styles;
values exact against CPU, errors of CPU's type and message with the tensor left as it was."""

import pytest
import torch
from cpu_outcomes import check_results

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
CAST_ERROR = "can't be cast to the desired output type"


def _values(dev):
    def t(v, dtype):
        return torch.tensor(v, dtype=dtype, device=dev)

    def out(dtype):
        return torch.empty(0, dtype=dtype, device=dev)

    u5, u8 = t([5, 200], torch.uint8), t([8, 100], torch.uint8)
    h = t([33000.0, 1.5], torch.float16)
    s = t([300, -300], torch.int16)
    third = t([1 / 3, 2 / 3], torch.float64)
    return [
        torch.sub(u5, u8, out=out(torch.float64)),
        torch.add(u5, u8, out=out(torch.int64)),
        torch.add(h, h, out=out(torch.float64)),
        torch.true_divide(h, t([0.666, 3.0], torch.float16), out=out(torch.float64)),
        torch.mul(s, s, out=out(torch.int64)),
        torch.mul(s, s, out=out(torch.float32)),
        t([1.0, 2.0], torch.float32).add_(third),  # computes in float64, then rounds
        t([1.0, 2.0], torch.float32).mul_(third),
        t([3, 4], torch.int64).add_(t([1, 2], torch.int8)),
        t([True, False], torch.bool).logical_and_(t([2, 0], torch.int32)),
        t([1.0, 2.0], torch.float32).add_(1.5),  # same dtype: the kernel path
    ]


ERRORS = [
    ("int32.add_(1.5)", lambda t: t(torch.int32).add_(1.5)),
    ("int32.mul_(1.5)", lambda t: t(torch.int32).mul_(1.5)),
    ("int64.sub_(float)", lambda t: t(torch.int64).sub_(t(torch.float32))),
    ("bool.add_(uint8)", lambda t: t(torch.bool).add_(t(torch.uint8))),
    ("uint8.mul_(float16)", lambda t: t(torch.uint8).mul_(t(torch.float16))),
    ("add(float, out=int)", lambda t: torch.add(t(torch.float32), 1, out=t(torch.int32))),
]


@pytest.mark.parametrize("device", DEVICES)
def test_written_dtype_does_not_change_the_computation(device):
    check_results(_values(device), _values("cpu"), equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_written_dtype_under_ral_mode(device):
    expected = _values("cpu")
    with torch_fl.ral_mode(device):
        got = _values("cpu")
    check_results(got, expected, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,call", ERRORS, ids=[e[0] for e in ERRORS])
def test_forbidden_cast_raises_as_cpu(device, name, call):
    made = []

    def tensor_on(dev):
        def t(dtype):
            made.append(torch.tensor([1, 0, 3], dtype=dtype, device=dev))
            return made[-1]

        return t

    with pytest.raises(RuntimeError, match=CAST_ERROR) as cpu_err:
        call(tensor_on("cpu"))
    made.clear()
    with pytest.raises(RuntimeError, match=CAST_ERROR) as ral_err:
        call(tensor_on(device))
    assert str(ral_err.value) == str(cpu_err.value)
    for m in made:  # nothing was written
        assert torch.equal(m.cpu(), torch.tensor([1, 0, 3]).to(m.dtype))
    assert float(torch.ones(2, device=device).add_(1).sum()) == 4.0  # the device still works
