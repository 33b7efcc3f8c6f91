"""Comparisons of an integer or bool tensor with a Python number compare in the promoted
dtype, as on CPU: `int_tensor < 0.5` is True where the element is 0. PyTorch's
test_lt_with_type_promotion (test_type_promotion.py) found ral returning False: the vendor
kernels receive the number as a kernel scalar and convert it to the tensor's dtype (0.5 -> 0),
the jit tier left Scalar operands out of the promotion, and an in-place comparison
(`int_tensor.lt_(0.5)`, jit tier) computed in self's dtype. Every comparison, functional,
in-place and out=, eight tensor dtypes and eight numbers, on both devices, in both styles, on
the default routing and with the jit tier forced, and under `torch_fl.fuse()`; compared with
CPU exactly (bool and integer results)."""

import pytest
import torch
from cpu_outcomes import check_results

import torch_fl
from torch_fl.dispatch import router

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
OPS = ("lt", "le", "gt", "ge", "eq", "ne")
DTYPES = (torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16, torch.bool, torch.float16, torch.float32)
NUMBERS = (0.5, 1.0, 1, 2, -1.5, True, 2.5, 1e10)


def _program(x):
    out = []
    for s in NUMBERS:
        for op in OPS:
            out.append(getattr(torch, op)(x, s))
            out.append(getattr(x.clone(), op + "_")(s))
        out.append(torch.lt(x, s, out=torch.empty(x.shape, dtype=torch.bool, device=x.device)))
        out.append(x[:, ::2] >= s)  # strided
    return out


def _input(dtype):
    return torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]]).to(dtype)


@pytest.fixture(params=["default", "jit"])
def routing(request):
    if request.param == "jit":
        for op in OPS:
            for ov in ("Scalar", "Tensor"):
                router.set_op_override(f"aten::{op}.{ov}", "jit")
    yield request.param
    router.clear_op_overrides()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_comparison_with_a_number_matches_cpu(device, dtype, routing):
    x = _input(dtype)
    check_results(_program(x.to(device)), _program(x))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", (torch.int32, torch.uint8, torch.bool), ids=str)
def test_comparison_with_a_number_under_ral_mode_matches_cpu(device, dtype):
    x = _input(dtype)
    expected = _program(x)
    with torch_fl.ral_mode(device):
        got = _program(x)
    check_results(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_comparison_with_a_number_in_a_fuse_region_matches_cpu(device):
    x = _input(torch.int32)
    expected = [(x + 0) < 0.5, (x * 1) >= 2.5, ((x - 0) == 1e10).to(torch.int32) + 1]
    xd = x.to(device)
    with torch_fl.fuse():
        got = [(xd + 0) < 0.5, (xd * 1) >= 2.5, ((xd - 0) == 1e10).to(torch.int32) + 1]
    check_results(got, expected)
