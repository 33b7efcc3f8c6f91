"""Capability: float16 and bfloat16 convolution, batch norm, pooling, upsampling and the fused
LSTM/GRU cells run as vendor kernels on the OpenCL device (ral:1, PoCL) with CPU's results.

Each case runs forward and backward on ral:1 in both styles (`.to` and `ral_mode`), NCHW and
channels_last where the op takes a layout, on both of the plugin's paths: inline (the host
loops over float32 shadows of the half operands, oneDNN's bfloat16 convolution or its float32
one over shadows, inline_cnn.c) and queued (the
OpenCL kernels, which load and store the half types through ld_f/st_f). It asserts through
`torch_fl.coverage()` that the forward and backward ops ran in the vendor tier, and compares
every output, gradient and running statistic with PyTorch CPU running the same dtype.

Tolerances: both sides compute in float32 and round each result once to the 16-bit type, so
they may differ by one rounding of the result, plus the float32 summation-order difference
of a reduction, whose rounding is a few units of the result's last place when the result is
small against its terms. rtol is two units in the last place (`2 * eps`: float16 2e-3,
bfloat16 1.6e-2) and atol is `2 * eps * sqrt(n)` for a reduction over n unit-scale terms (its
typical magnitude, so one ulp of it); max-pooling values and indices are compared exactly.
The recurrent cells compare with CPU's unfused decomposition, which rounds every intermediate
op to the 16-bit type, so they take `8 * eps` over the sequence.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import plugin_device
from test_opencl_cnn_inline import _run, path  # noqa: F401  (path: the inline/queued fixture)
from test_opencl_latency import DEV
from torch import nn

import torch_fl

HALF = [torch.float16, torch.bfloat16]
HALF_IDS = ["float16", "bfloat16"]


def _tol(dtype: torch.dtype, n: int = 1, ulps: float = 2.0) -> dict:
    """rtol `ulps` units in the last place, atol that much of a sum of n unit-scale terms."""
    eps = torch.finfo(dtype).eps
    return {"rtol": ulps * eps, "atol": ulps * eps * math.sqrt(n)}


def _half_check(style, fn, tensors, params, dtype, n, ops, exact_outputs=False, ulps=2.0, strides=True, ref=None):
    """fn on DEV in `style` against CPU in `dtype` (or in `ref`, its results rounded to `dtype`,
    for an op CPU lacks in `dtype`): outputs (with CPU's strides unless `strides` is False),
    gradients, updated params; each of `ops` ran in the vendor tier and none in the cpu tier
    or a decomposition."""
    tensors = [t.to(dtype) if t.is_floating_point() else t for t in tensors]
    params = [p.to(dtype) for p in params]
    if ref is None:
        want = _run(style, "cpu", fn, tensors, params)
    else:

        def up(ts):
            return [t.to(ref) if t.is_floating_point() else t for t in ts]

        want = _run(style, "cpu", fn, up(tensors), up(params))
        want = [[w.to(dtype) if w.is_floating_point() else w for w in part] for part in want]
    with torch_fl.coverage() as cov:
        got = _run(style, DEV, fn, tensors, params)
    tol = _tol(dtype, n, ulps)
    for w, g in zip(want[0], got[0]):
        assert g.dtype == w.dtype and (not strides or g.stride() == w.stride()), (g.dtype, g.stride(), w.stride())
        if exact_outputs or not w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(g, w, **tol)
    assert [len(x) for x in got] == [len(x) for x in want]
    for w, g in zip(want[1] + want[2] + want[3], got[1] + got[2] + got[3]):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, **tol)
    vendor, elsewhere = set(cov.ops_in_tier("vendor")), set(cov.ops_in_tier("cpu")) | set(cov.ops_in_tier("decomp"))
    for op in ops:
        assert op in vendor and op not in elsewhere, (op, cov.counts)
    return cov


def _layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "nchw":
        return x
    return x.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)


LAYOUTS = ["nchw", "channels_last"]
CONV_OPS = ("aten::convolution", "aten::convolution_backward")

# (dim, cin, cout, kernel, stride, padding, dilation, groups, transposed)
CONV_CASES = {
    "2d_3x3_pad1": (2, 8, 8, 3, 1, 1, 1, 1, False),
    "2d_stride2_groups2": (2, 4, 6, 3, 2, 1, 1, 2, False),
    "2d_depthwise": (2, 6, 6, 3, 1, 2, 2, 6, False),
    "2d_transposed": (2, 4, 6, 3, 2, 1, 1, 1, True),
    "1d_stride2": (1, 4, 6, 5, 2, 2, 1, 1, False),
    "3d_3x3x3": (3, 3, 4, 3, 1, 1, 1, 1, False),
}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_half_convolution_matches_cpu(case, dtype, layout, style, path):  # noqa: F811
    """Output, input, weight and bias gradients of a float16/bfloat16 convolution."""
    dim, cin, cout, k, s, p, d, groups, transposed = CONV_CASES[case]
    if layout == "channels_last" and dim == 1:
        pytest.skip("a 1-d convolution has no channels_last layout")
    g = torch.Generator().manual_seed(2)
    x = _layout(torch.randn((2, cin) + (8,) * dim, generator=g), layout)
    wshape = (cin, cout // groups) if transposed else (cout, cin // groups)
    w = _layout(torch.randn(wshape + (k,) * dim, generator=g) / math.sqrt(cin * k**dim / groups), layout)
    b = torch.randn(cout, generator=g)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dim]

    def fn(x, w, b):
        if transposed:
            return F.conv_transpose2d(x, w, b, stride=s, padding=p, output_padding=1, groups=groups, dilation=d)
        return conv(x, w, b, stride=s, padding=p, dilation=d, groups=groups)

    # the longest reduction: a weight gradient over every sample and position of either side
    y = fn(x, w, b)
    n = max(y[:, 0].numel(), x[:, 0].numel(), cin * k**dim)
    _half_check(style, fn, [x], [w, b], dtype, n, CONV_OPS, strides=False)


@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("x_dtype,w_dtype", [(torch.float16, torch.float32), (torch.float32, torch.bfloat16)])
def test_convolution_refuses_mixed_input_and_weight_dtypes_like_cpu(x_dtype, w_dtype, which):
    """CPU's check_input_same_type_as_parameters (argument_checks.py): a convolution whose
    input and weight dtypes differ raises a RuntimeError on both devices and styles, as on CPU
    (it ran, float32 input with bfloat16 weights, on ral); the device keeps working."""
    dev = plugin_device(which)
    x, w = torch.randn(2, 3, 8, 8, dtype=x_dtype), torch.randn(4, 3, 3, 3, dtype=w_dtype)
    with pytest.raises(RuntimeError):
        F.conv2d(x, w)
    words = r"Input type \(torch\.\w+Tensor\) and weight type \(torch\.\w+Tensor\) should be the same"
    with pytest.raises(RuntimeError, match=words):
        F.conv2d(x.to(dev), w.to(dev))
    with pytest.raises(RuntimeError, match=words), torch_fl.ral_mode(dev):
        F.conv2d(x, w)
    y = F.conv2d(x.to(dev), w.to(x_dtype).to(dev))
    torch.testing.assert_close(y.cpu(), F.conv2d(x, w.to(x_dtype)), **_tol(x_dtype, 27))


BN_OPS = ("aten::native_batch_norm", "aten::native_batch_norm_backward")


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mixed", [False, True], ids=["same_dtype", "float32_params"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
def test_half_batch_norm_matches_cpu(dtype, training, mixed, layout, style, path):  # noqa: F811
    """Output, gradients and running statistics; with float32 weight and running stats (CPU's
    mixed form) the statistics stay float32 and the output keeps the input's dtype."""
    g = torch.Generator().manual_seed(3)
    x = _layout(torch.randn(4, 5, 6, 7, generator=g) * 2 + 1, layout)
    w, b = torch.rand(5, generator=g) + 0.5, torch.randn(5, generator=g)
    pdt = torch.float32 if mixed else dtype
    rm0, rv0 = torch.randn(5, generator=g).to(pdt), (torch.rand(5, generator=g) + 0.5).to(pdt)
    stats = []

    def fn(x, w, b):
        rm, rv = rm0.clone().to(x.device), rv0.clone().to(x.device)
        y = F.batch_norm(x, rm, rv, w.to(pdt), b.to(pdt), training=training, momentum=0.3, eps=1e-4)
        stats.append((rm, rv))
        return y

    # channels_last: ral returns batch norm row-major on both devices, float32 too (the
    # manifest asks for contiguous operands), so only values are compared there
    _half_check(style, fn, [x], [w, b], dtype, 4 * 6 * 7, BN_OPS, strides=layout == "nchw")
    (cpu_rm, cpu_rv), (dev_rm, dev_rv) = stats
    assert dev_rm.dtype == cpu_rm.dtype == pdt
    torch.testing.assert_close(dev_rm.cpu(), cpu_rm, **_tol(dtype, 1))
    torch.testing.assert_close(dev_rv.cpu(), cpu_rv, **_tol(dtype, 1))


def test_half_batch_norm_saves_float32_statistics_like_cpu(path):  # noqa: F811
    """native_batch_norm's save_mean/save_invstd dtypes: float32 with float32 weight (mixed),
    the input's dtype otherwise, as on CPU."""
    for wdt in (torch.float32, torch.bfloat16):
        x = torch.randn(3, 4, 5, dtype=torch.bfloat16)
        w, rm, rv = torch.ones(4, dtype=wdt), torch.zeros(4, dtype=wdt), torch.ones(4, dtype=wdt)
        want = torch.native_batch_norm(x, w, None, rm, rv, True, 0.1, 1e-5)
        with torch_fl.coverage() as cov:
            got = torch.native_batch_norm(x.to(DEV), w.to(DEV), None, rm.to(DEV), rv.to(DEV), True, 0.1, 1e-5)
        assert [t.dtype for t in got] == [t.dtype for t in want]
        for a, e in zip(got, want):
            torch.testing.assert_close(a.cpu(), e, **_tol(torch.bfloat16, 15))
        assert "aten::native_batch_norm" in cov.ops_in_tier("vendor"), cov.counts


POOL_CASES = {
    "max_k3s1p1": (lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True), True, 1, "max_pool2d_with_indices"),
    "max_k2s2_dil2_ceil": (
        lambda x: F.max_pool2d(x, 2, 2, 0, 2, ceil_mode=True, return_indices=True),
        True,
        1,
        "max_pool2d_with_indices",
    ),
    "adaptive_max": (lambda x: F.adaptive_max_pool2d(x, (4, 3), return_indices=True), True, 1, "adaptive_max_pool2d"),
    "avg_k3s2p1": (lambda x: F.avg_pool2d(x, 3, 2, 1), False, 9, "avg_pool2d"),
    "avg_no_pad_count": (lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), False, 9, "avg_pool2d"),
    "adaptive_avg": (lambda x: F.adaptive_avg_pool2d(x, (4, 3)), False, 9, "_adaptive_avg_pool2d"),
}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("case", list(POOL_CASES))
def test_half_pool2d_matches_cpu(case, dtype, layout, style, path):  # noqa: F811
    """Values (max: bit-equal, a NaN included; indices int64) and grad_input."""
    fn, is_max, n, op = POOL_CASES[case]
    x = torch.randn(2, 3, 9, 11, generator=torch.Generator().manual_seed(4))
    if is_max:
        x[0, 1, 2, 3] = float("nan")
    x = _layout(x, layout)
    _half_check(style, fn, [x], [], dtype, n, (f"aten::{op}", f"aten::{op}_backward"), exact_outputs=is_max)


# Views the host path's float32 shadows must mirror (ocl_f32_open: one float per element offset):
# the input is made in the shape each view starts from, and the view is taken on the device.
SHADOW_VIEWS = {
    "permuted_dense": ((2, 3, 11, 9), lambda x: x.transpose(2, 3)),  # dense, not NCHW/channels_last
    "every_other_column": ((2, 3, 9, 22), lambda x: x[..., ::2]),  # not dense: gaps in the span
    "at_an_offset": ((3, 3, 9, 11), lambda x: x[1:]),  # NCHW from a storage offset
}


@pytest.mark.parametrize("view", list(SHADOW_VIEWS))
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("case", ["max_k3s1p1", "avg_no_pad_count", "adaptive_avg"])
def test_half_pool2d_of_views_matches_cpu(case, dtype, view, path):  # noqa: F811
    """The widening into a shadow and the rounding back (whole-span runs for dense operands,
    row by row otherwise) keep every element where the view puts it."""
    fn, is_max, n, op = POOL_CASES[case]
    shape, take = SHADOW_VIEWS[view]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(6))
    if is_max:
        x[0, 1, 2, 3] = float("nan")
    _half_check(
        "to", lambda t: fn(take(t)), [x], [], dtype, n, (f"aten::{op}", f"aten::{op}_backward"), exact_outputs=is_max
    )


POOL3_CASES = {
    "max3d": (lambda x: F.max_pool3d(x, 2, 2, return_indices=True), True, 1, "max_pool3d_with_indices"),
    "adaptive_max3d": (
        lambda x: F.adaptive_max_pool3d(x, (2, 3, 2), return_indices=True),
        True,
        1,
        "adaptive_max_pool3d",
    ),
    "avg3d": (lambda x: F.avg_pool3d(x, 3, 2, 1), False, 27, "avg_pool3d"),
    "adaptive_avg3d": (lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), False, 27, "_adaptive_avg_pool3d"),
}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("case", list(POOL3_CASES))
def test_half_pool3d_matches_cpu(case, dtype, layout, style, path):  # noqa: F811
    """As the 2-d cases; CPU has no float16/bfloat16 avg_pool3d ("avg_pool3d_out_frame" not
    implemented; CUDA has, and so does ral:0), so that one compares with CPU's float32 result
    rounded to the dtype (the input gradient: float32 output gradients, two roundings apart)."""
    fn, is_max, n, op = POOL3_CASES[case]
    x = _layout(torch.randn(2, 3, 5, 6, 7, generator=torch.Generator().manual_seed(5)), layout)
    ref = torch.float32 if case == "avg3d" else None
    ops = (f"aten::{op}", f"aten::{op}_backward")
    _half_check(style, fn, [x], [], dtype, n, ops, exact_outputs=is_max, ref=ref)


UP_CASES = {
    "nearest2d": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), 4, "upsample_nearest2d"),
    "nearest_exact2d": (
        lambda x: F.interpolate(x, size=(11, 7), mode="nearest-exact"),
        4,
        "_upsample_nearest_exact2d",
    ),
    "bilinear2d": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), 16, "upsample_bilinear2d"),
    "bilinear2d_align": (
        lambda x: F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=True),
        16,
        "upsample_bilinear2d",
    ),
    "bicubic2d": (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), 64, "upsample_bicubic2d"),
}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("case", list(UP_CASES))
def test_half_upsample_matches_cpu(case, dtype, layout, style, path):  # noqa: F811
    """Upsampled values and grad_input (a sum of up to n weighted output gradients)."""
    fn, n, op = UP_CASES[case]
    x = _layout(torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(6)), layout)
    _half_check(style, fn, [x], [], dtype, n, (f"aten::{op}", f"aten::{op}_backward"))


UP_OTHER = {
    "nearest1d": (lambda x: F.interpolate(x, scale_factor=3, mode="nearest"), (2, 3, 7), 3, "upsample_nearest1d"),
    "linear1d": (lambda x: F.interpolate(x, size=15, mode="linear"), (2, 3, 7), 4, "upsample_linear1d"),
    "trilinear3d": (
        lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"),
        (2, 3, 3, 4, 5),
        64,
        "upsample_trilinear3d",
    ),
    "nearest3d": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (2, 3, 3, 4, 5), 8, "upsample_nearest3d"),
}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("case", list(UP_OTHER))
def test_half_upsample_1d_3d_matches_cpu(case, dtype, style, path):  # noqa: F811
    fn, shape, n, op = UP_OTHER[case]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(7))
    _half_check(style, fn, [x], [], dtype, n, (f"aten::{op}", f"aten::{op}_backward"))


RNN_OPS = {
    "lstm": ("aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl"),
    "gru": ("aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward"),
}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("kind", list(RNN_OPS))
def test_half_recurrent_cells_match_cpu(kind, dtype, style, path):  # noqa: F811
    """nn.LSTM / nn.GRU in float16/bfloat16 (2 layers, 4 steps): outputs, final states and
    every parameter and input gradient; the fused cells and their backward in the vendor tier."""
    torch.manual_seed(8)
    mod = (nn.LSTM if kind == "lstm" else nn.GRU)(16, 16, num_layers=2)
    params = [p.detach() for p in mod.parameters()]
    x = torch.randn(4, 3, 16, generator=torch.Generator().manual_seed(9))

    def fn(x, *ps):
        out, state = torch.func.functional_call(mod, dict(zip([n for n, _ in mod.named_parameters()], ps)), (x,))
        return (out, *state) if isinstance(state, tuple) else (out, state)

    # CPU runs the cells unfused in the 16-bit type (each gate op rounded), over 4 steps
    _half_check(style, fn, [x], params, dtype, 16, RNN_OPS[kind], ulps=8.0)


def _small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 1, 1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 8 * 8, 10),
    )


def _sgd_step(model, x, y, autocast):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dev_type = "ral" if x.device.type == "ral" else "cpu"
    with torch.autocast(dev_type, torch.float16, enabled=autocast):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    grads = [p.grad.detach().float().cpu() for p in model.parameters()]
    opt.step()
    after = [p.detach().float().cpu() for p in model.parameters()]
    stats = [b.detach().float().cpu() for b in model.buffers() if b.is_floating_point()]
    return loss.detach().float().cpu(), grads, after, stats


@pytest.mark.parametrize("form", ["bfloat16", "autocast_float16"])
def test_half_cnn_training_step_matches_cpu(form, path):  # noqa: F811
    """conv + BN + ReLU + max-pool + linear, one SGD step: a bfloat16 model, or a float32 one
    under torch.autocast("ral", torch.float16) against CPU's autocast; loss, gradients,
    updated parameters and running statistics, the CNN ops in the vendor tier."""
    autocast = form == "autocast_float16"
    dtype = torch.float16 if autocast else torch.bfloat16
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)
    if not autocast:
        x = x.to(dtype)
    want = _sgd_step(_small_cnn().to(x.dtype), x, y, autocast)
    with torch_fl.coverage() as cov:
        got = _sgd_step(_small_cnn().to(x.dtype).to(DEV), x.to(DEV), y.to(DEV), autocast)
    # the longest reduction is the linear layer's weight gradient input, 512 terms
    tol = _tol(dtype, 512, ulps=4.0)
    torch.testing.assert_close(got[0], want[0], **tol)
    for a, e in zip(got[1] + got[2] + got[3], want[1] + want[2] + want[3]):
        torch.testing.assert_close(a, e, **tol)
    vendor, on_cpu = set(cov.ops_in_tier("vendor")), set(cov.ops_in_tier("cpu"))
    for op in (*CONV_OPS, *BN_OPS, "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward"):
        assert op in vendor and op not in on_cpu, (op, cov.counts)


ROUND_ONCE = {
    "conv2d_bias": (lambda x, w, b: F.conv2d(x, w, b, padding=1), (2, 4, 8, 8), ((6, 4, 3, 3), (6,))),
    "conv2d_groups_stride": (lambda x, w: F.conv2d(x, w, stride=2, groups=2), (2, 4, 9, 9), ((6, 2, 3, 3),)),
    "batch_norm_train": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-3),
        (4, 5, 6, 7),
        ((5,), (5,)),
    ),
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1), (2, 3, 9, 11), ()),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1), (2, 3, 9, 11), ()),
    "bilinear2d": (lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear"), (2, 3, 5, 6), ()),
    "bicubic2d": (lambda x: F.interpolate(x, size=(9, 4), mode="bicubic"), (2, 3, 5, 6), ()),
    "trilinear3d": (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), (1, 2, 3, 4, 5), ()),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 2, 1), (1, 2, 4, 5, 6), ()),
    # input gates [B, 4H], hidden gates, cx [B, H], two biases [4H]; the forward only: the
    # backward reads the workspace of activated gates, stored (rounded) in the dtype, as CUDA
    "lstm_cell": (
        lambda ig, hg, cx, bi, bh: torch.ops.aten._thnn_fused_lstm_cell(ig, hg, cx, bi, bh)[:2],
        (3, 16),
        ((3, 16), (3, 4), (16,), (16,)),
    ),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("case", list(ROUND_ONCE))
def test_half_results_are_the_float32_results_rounded_once(case, dtype, layout, path):  # noqa: F811
    """On ral:1 each half op (forward, and backward for the given output gradient) gives
    bit for bit the same op's float32 result on the widened operands, rounded once to the
    dtype: the host path's shadows and the queued kernels' ld_f/st_f compute in float32 and
    round only the results (a truncation, a rounding per step or a lost stride differs).
    bfloat16 convolutions on the host path run oneDNN's bfloat16 primitive where the CPU has
    one, which also accumulates in float32 and rounds once: at these sizes its bits equal the
    float32 primitive's rounded result (both orders of summation happen to round alike)."""
    fn, shape, pshapes = ROUND_ONCE[case]
    g = torch.Generator().manual_seed(10)
    x = torch.randn(shape, generator=g)
    if layout == "channels_last":
        if x.dim() < 4:
            pytest.skip("no channels_last layout for a 2-d operand")
        x = _layout(x, layout)
    ins = [x.to(dtype)] + [torch.randn(s, generator=g).to(dtype) for s in pshapes]
    results = {}
    for dt in (dtype, torch.float32):
        # float32: the half values widened; batch norm keeps float32 weight and bias in both
        # runs (CPU's mixed form), so its saved statistics stay float32 for the backward
        ts = [t.to(dt if i == 0 or case != "batch_norm_train" else torch.float32) for i, t in enumerate(ins)]
        ts = [t.to(DEV).requires_grad_() for t in ts]
        with torch_fl.coverage() as cov:
            outs = fn(*ts)
            outs = outs if isinstance(outs, tuple) else (outs,)
            gos = [torch.randn(o.shape, generator=torch.Generator().manual_seed(11)).to(dtype) for o in outs]
            grads = () if case == "lstm_cell" else torch.autograd.grad(outs, ts, [go.to(dt).to(DEV) for go in gos])
        mine = {op for op, _ in cov.counts if any(k in op for k in ("conv", "batch_norm", "pool", "upsample", "lstm"))}
        assert mine and mine <= set(cov.ops_in_tier("vendor")), cov.counts
        assert not mine & (set(cov.ops_in_tier("cpu")) | set(cov.ops_in_tier("decomp"))), cov.counts
        results[dt] = [t.detach().cpu() for t in (*outs, *grads)]
    for a, e in zip(results[dtype], results[torch.float32]):
        torch.testing.assert_close(a, e.to(a.dtype), rtol=0, atol=0, equal_nan=True)
