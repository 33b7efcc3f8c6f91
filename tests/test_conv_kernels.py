"""Convolution as a vendor kernel (plugins/host/conv.c): forward and backward against CPU.

Every case runs PyTorch's CPU convolution and its autograd backward, then the same on the
device in both styles (`.to(dev)` and `ral_mode`), and compares output, grad_input,
grad_weight and grad_bias. On ral:0 it also asserts that `aten::convolution` and
`aten::convolution_backward` ran in the vendor tier (torch_fl.coverage()) on both devices
(ral:1: plugins/opencl/conv.c, float16 and bfloat16 included), except for a dtype the
device's dtype_mask lacks, whose manifest entries the registry refuses.

Tolerances: float32 rtol 1e-4 / atol 1e-4 (sums of up to ~600 products in a different order
than oneDNN's); float16 2e-2, bfloat16 5e-2 relative and absolute (the kernel widens to
float32 and rounds once per output, CPU rounds the half-precision result of its own path).
"""

from __future__ import annotations

import pytest
import torch
from conftest import digests_across_budgets, plugin_device

import torch_fl

F32 = (1e-4, 1e-4)
HALF = {torch.float16: (2e-2, 2e-2), torch.bfloat16: (5e-2, 5e-2)}

# name, x shape, weight shape, convolution arguments
CASES = [
    ("2d", (4, 6, 9, 9), (5, 6, 3, 3), {"padding": [1, 1]}),
    ("2d_stride_dilation", (3, 4, 11, 10), (6, 4, 3, 2), {"padding": [2, 1], "stride": [2, 3], "dilation": [2, 1]}),
    ("2d_1x1", (2, 8, 5, 5), (4, 8, 1, 1), {}),
    ("2d_groups", (2, 6, 7, 7), (4, 3, 3, 3), {"padding": [1, 1], "groups": 2}),
    ("depthwise", (2, 6, 7, 7), (6, 1, 3, 3), {"padding": [1, 1], "groups": 6}),
    ("depthwise_multiplier", (2, 3, 8, 8), (6, 1, 3, 3), {"stride": [2, 2], "groups": 3}),
    ("1d", (2, 3, 17), (4, 3, 5), {"padding": [1], "stride": [2]}),
    ("3d", (2, 3, 5, 6, 7), (4, 3, 3, 2, 3), {"padding": [1, 0, 1], "stride": [1, 2, 1]}),
    (
        "transposed",
        (2, 6, 5, 5),
        (6, 4, 3, 3),
        {"padding": [1, 1], "stride": [2, 2], "transposed": True, "output_padding": [1, 1]},
    ),
    (
        "transposed_groups_dilation",
        (2, 6, 5, 5),
        (6, 2, 3, 3),
        {"padding": [0, 1], "stride": [2, 1], "dilation": [2, 1], "transposed": True, "groups": 2},
    ),
    ("transposed_1d", (2, 4, 9), (4, 3, 4), {"stride": [3], "transposed": True, "output_padding": [2]}),
]


def _args(x_shape, w_shape, cfg):
    nd = len(x_shape) - 2
    return (
        cfg.get("stride", [1] * nd),
        cfg.get("padding", [0] * nd),
        cfg.get("dilation", [1] * nd),
        cfg.get("transposed", False),
        cfg.get("output_padding", [0] * nd),
        cfg.get("groups", 1),
    )


def _bias_len(w_shape, cfg):
    return w_shape[1] * cfg.get("groups", 1) if cfg.get("transposed") else w_shape[0]


def _conv(x, w, b, args):
    return torch.ops.aten.convolution(x, w, b, *args)


def _reference(x, w, b, args, grad):
    """CPU output and gradients (computed in float32 for half inputs)."""
    xc, wc = x.float().clone().requires_grad_(), w.float().clone().requires_grad_()
    bc = None if b is None else b.float().clone().requires_grad_()
    y = _conv(xc, wc, bc, args)
    y.backward(grad.float())
    return y, xc.grad, wc.grad, None if bc is None else bc.grad


def _check(got, want, tol, what):
    for name, a, e in zip(("output", "grad_input", "grad_weight", "grad_bias"), got, want):
        if e is None:
            assert a is None, f"{what}: {name} should be None"
            continue
        torch.testing.assert_close(a.cpu().float(), e, rtol=tol[0], atol=tol[1], msg=f"{what}: {name}")


def _run_to(dev, x, w, b, args, grad, needs):
    xd = x.to(dev).requires_grad_(needs[0])
    wd = w.to(dev).requires_grad_(needs[1])
    bd = None if b is None else b.to(dev).requires_grad_(needs[2])
    y = _conv(xd, wd, bd, args)
    y.backward(grad.to(dev))
    return y, xd.grad, wd.grad, None if bd is None else bd.grad


def _run_mode(dev, x, w, b, args, grad, needs):
    xm = x.clone().requires_grad_(needs[0])
    wm = w.clone().requires_grad_(needs[1])
    bm = None if b is None else b.clone().requires_grad_(needs[2])
    with torch_fl.ral_mode(dev):
        y = _conv(xm, wm, bm, args)
        (y * grad).sum().backward()  # the CPU tensor grad is uploaded by the mode
        out = (y.cpu(), xm.grad, wm.grad, None if bm is None else bm.grad)
    return out


STYLES = {"to": _run_to, "mode": _run_mode}


def _assert_vendor(cov, dev, dtype=torch.float32, backward=True):
    if not _device_has(dev, dtype):
        return  # a dtype the device lacks: the registry refuses those entries
    ran = cov.ops_in_tier("vendor")
    assert "aten::convolution" in ran, cov.counts
    if backward:
        assert "aten::convolution_backward" in ran, cov.counts
    assert not any(op.startswith("aten::convolution") for op in cov.ops_in_tier("cpu")), cov.counts


_DTYPE_BIT = {torch.float16: 6, torch.bfloat16: 7, torch.float32: 8}


def _device_has(dev, dtype):
    """Whether the device keeps a manifest's entries for dtype (its dtype_mask has it)."""
    return any(d.dtype_mask >> _DTYPE_BIT[dtype] & 1 for d in torch_fl.devices() if f"ral:{d.index}" == dev)


def _case(which, style, x, w, b, args, needs=(True, True, True), tol=F32, what=""):
    dev = plugin_device(which)
    torch.manual_seed(1)
    y_ref_shape = _conv(x.float(), w.float(), None if b is None else b.float(), args).shape
    grad = torch.randn(y_ref_shape).to(x.dtype)
    want = _reference(x, w, b, args, grad)
    want = tuple(None if (k > 0 and not needs[k - 1]) or e is None else e for k, e in enumerate(want))
    with torch_fl.coverage() as cov:
        got = STYLES[style](dev, x, w, b, args, grad, needs)
    _check(got, want, tol, f"{what} {dev} {style}")
    _assert_vendor(cov, dev, x.dtype)


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("name,xs,ws,cfg", CASES, ids=[c[0] for c in CASES])
def test_convolution_matches_cpu(name, xs, ws, cfg, which, style):
    torch.manual_seed(0)
    x, w, b = torch.randn(xs), torch.randn(ws), torch.randn(_bias_len(ws, cfg))
    _case(which, style, x, w, b, _args(xs, ws, cfg), what=name)


# output_mask combinations: which of (input, weight, bias) need a gradient; bias None too
@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize(
    "needs,with_bias",
    [
        ((True, True, True), False),
        ((False, True, True), True),
        ((True, False, False), True),
        ((False, True, False), True),
        ((True, True, False), True),
    ],
)
def test_output_mask_combinations(which, needs, with_bias):
    torch.manual_seed(0)
    xs, ws, cfg = (3, 4, 8, 8), (5, 4, 3, 3), {"padding": [1, 1], "stride": [2, 1]}
    x, w = torch.randn(xs), torch.randn(ws)
    b = torch.randn(5) if with_bias else None
    _case(which, "to", x, w, b, _args(xs, ws, cfg), needs=needs, what=f"mask {needs}")


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_channels_last_and_strided_operands(which, style):
    """channels_last input and weight, a non-contiguous (sliced) input with a storage offset."""
    torch.manual_seed(0)
    args = _args((2, 6, 9, 9), (5, 6, 3, 3), {"padding": [1, 1]})
    x = torch.randn(2, 6, 9, 9).to(memory_format=torch.channels_last)
    w = torch.randn(5, 6, 3, 3).to(memory_format=torch.channels_last)
    _case(which, style, x, w, torch.randn(5), args, what="channels_last")
    big = torch.randn(3, 8, 12, 11)
    x = big[1:, 1:7, ::1, 1:10]  # offset, strided in N, C and W
    assert not x.is_contiguous() and x.storage_offset() > 0
    _case(which, style, x, torch.randn(5, 6, 3, 3), torch.randn(5), args, what="strided")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_half_types(which, dtype):
    torch.manual_seed(0)
    xs, ws, cfg = (2, 6, 9, 9), (5, 6, 3, 3), {"padding": [1, 1]}
    x, w, b = (torch.randn(s).to(dtype) for s in (xs, ws, (5,)))
    _case(which, "to", x, w, b, _args(xs, ws, cfg), tol=HALF[dtype], what=str(dtype))


def test_result_is_row_major_like_every_ral_convolution():
    """A ral convolution's result is row-major whatever the input layout (cpu.py
    ROW_MAJOR_RESULTS: what torch.compile's fake tensors expect of a PrivateUse1 conv)."""
    plugin_device("host")
    x = torch.randn(2, 6, 9, 9).to(memory_format=torch.channels_last)
    y = torch.nn.functional.conv2d(x.to("ral:0"), torch.randn(5, 6, 3, 3).to("ral:0"), padding=1)
    assert y.is_contiguous()


@pytest.mark.parametrize("which", ["host", "opencl"])
def test_bad_input_raises_and_device_keeps_working(which):
    dev = plugin_device(which)
    x, w = torch.randn(2, 6, 9, 9), torch.randn(5, 4, 3, 3)  # 6 input channels, weight wants 4
    with pytest.raises(RuntimeError, match="channel"):
        torch.nn.functional.conv2d(x.to(dev), w.to(dev))
    w = torch.randn(5, 6, 3, 3)
    y = torch.nn.functional.conv2d(x.to(dev), w.to(dev), padding=1)
    torch.testing.assert_close(y.cpu(), torch.nn.functional.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)


_BUDGET_CHILD = """
import hashlib, torch, torch_fl
torch.manual_seed(0)
x = torch.randn(20, 8, 12, 12).to("ral:0").requires_grad_()
w = torch.randn(16, 8, 3, 3).to("ral:0").requires_grad_()
y = torch.nn.functional.conv2d(x, w, padding=1)
y.backward(torch.randn(y.shape).to("ral:0"))
print(hashlib.sha256(w.grad.cpu().numpy().tobytes() + x.grad.cpu().numpy().tobytes()).hexdigest())
"""


def test_gradients_do_not_depend_on_the_thread_budget():
    """The weight gradient sums fixed batch partitions in order: the same bits on 1 and 3
    threads (TORCH_FL_HOST_THREADS is read once per process, so each budget is a child)."""
    plugin_device("host")
    digests = digests_across_budgets(_BUDGET_CHILD, ("1", "3"))
    assert len(digests) == 1
