"""Capability: max and average pooling (`max_pool2d_with_indices`, `avg_pool2d`,
`_adaptive_avg_pool2d`) and nearest / bilinear
upsampling (`upsample_nearest2d`, `upsample_bilinear2d`), forward and backward, run as vendor
kernels on ral:1 (OpenCL plugin: plugins/opencl/pool.c, upsample.c) with CPU's results, on both
of its paths: the host path over the buffers' host memory on a CPU runtime (PoCL;
plugins/opencl/inline_pool.c, the default there) and the queued OpenCL kernels (kernels/pool.cl,
upsample.cl: `ral_opencl_inline(0)` in-process, and a subprocess with `TORCH_FL_OPENCL_INLINE=0`,
plain runtime buffers). ral:0 (host plugin, the same plane math: plugins/common/resample.c) is
checked against CPU too.

Every case runs forward and backward (loss: a fixed random weighting of the output) in both
styles (`.to` and `ral_mode`) and compares output and input gradient with PyTorch's CPU result:
rtol 1e-5, atol 1e-5 of the largest value (pooling sums in CPU's order, but adaptive pooling
divides once where CPU divides twice, and bilinear weights are products of float weights).
Inputs: contiguous, channels_last, and sliced (offset, non-unit strides): the kernels take any
strides, so results are laid out as CPU's (asserted in `.to` style). `torch_fl.coverage()` must show both
ops in the vendor tier and none in the cpu tier; the plugin's counters (`ral_opencl_counters`)
say which path ran: on the host path the op makes no OpenCL kernel launch, queued it does.
"""

from __future__ import annotations

import copy
import ctypes
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import plugin_device, run_python  # noqa: E402

try:  # the OpenCL device, its library and counters; ral:0 cases run without them
    from test_opencl_latency import _NAMES, _SO, DEV, counters  # noqa: E402

    _SO.ral_opencl_inline.restype = ctypes.c_int
    _NO_OPENCL = ""
except pytest.skip.Exception as why:  # no OpenCL plugin/platform, or not a CPU runtime
    _SO, DEV, _NO_OPENCL = None, None, str(why)

RTOL, ATOL = 1e-5, 1e-5

# name: (fn, aten op); the backward op is f"{op}_backward"
CASES = {
    "max_k3s2p1": (lambda t: F.max_pool2d(t, 3, 2, 1), "aten::max_pool2d_with_indices"),
    "max_rect_dilated_ceil": (
        lambda t: F.max_pool2d(t, (3, 2), (2, 1), (1, 1), dilation=(2, 1), ceil_mode=True),
        "aten::max_pool2d_with_indices",
    ),
    "avg_k3s2p1_ceil_nopad": (
        lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        "aten::avg_pool2d",
    ),
    "avg_k3s1p1_pad": (lambda t: F.avg_pool2d(t, 3, 1, 1), "aten::avg_pool2d"),
    "avg_rect_ceil_pad": (
        lambda t: F.avg_pool2d(t, (3, 2), (2, 1), (1, 0), ceil_mode=True, count_include_pad=True),
        "aten::avg_pool2d",
    ),
    "avg_divisor": (lambda t: F.avg_pool2d(t, 2, 2, 1, divisor_override=3), "aten::avg_pool2d"),
    "adaptive_4x3": (lambda t: F.adaptive_avg_pool2d(t, (4, 3)), "aten::_adaptive_avg_pool2d"),
    "adaptive_5x7": (lambda t: F.adaptive_avg_pool2d(t, (5, 7)), "aten::_adaptive_avg_pool2d"),
    "adaptive_up_13x12": (lambda t: F.adaptive_avg_pool2d(t, (13, 12)), "aten::_adaptive_avg_pool2d"),
    "nearest_x2.5": (lambda t: F.interpolate(t, scale_factor=2.5, mode="nearest"), "aten::upsample_nearest2d"),
    "nearest_x2": (lambda t: F.interpolate(t, scale_factor=2, mode="nearest"), "aten::upsample_nearest2d"),
    "nearest_size_18x7": (lambda t: F.interpolate(t, size=(18, 7), mode="nearest"), "aten::upsample_nearest2d"),
    "nearest_exact_x1.7": (
        lambda t: F.interpolate(t, scale_factor=1.7, mode="nearest-exact"),
        "aten::_upsample_nearest_exact2d",
    ),
    "nearest_exact_size_5x20": (
        lambda t: F.interpolate(t, size=(5, 20), mode="nearest-exact"),
        "aten::_upsample_nearest_exact2d",
    ),
    "bilinear_x1.7": (lambda t: F.interpolate(t, scale_factor=1.7, mode="bilinear"), "aten::upsample_bilinear2d"),
    "bilinear_x0.6_corners": (
        lambda t: F.interpolate(t, scale_factor=0.6, mode="bilinear", align_corners=True),
        "aten::upsample_bilinear2d",
    ),
    "bilinear_size_13x20_corners": (
        lambda t: F.interpolate(t, size=(13, 20), mode="bilinear", align_corners=True),
        "aten::upsample_bilinear2d",
    ),
    "bilinear_size_7x5": (lambda t: F.interpolate(t, size=(7, 5), mode="bilinear"), "aten::upsample_bilinear2d"),
}

# The 1-d forms over [N, C, L] (planes of one row); "special" layout: NaN and infinities.
CASES_1D = {
    "nearest1d_x2.5": (lambda t: F.interpolate(t, scale_factor=2.5, mode="nearest"), "aten::upsample_nearest1d"),
    "nearest_exact1d_size_7": (
        lambda t: F.interpolate(t, size=7, mode="nearest-exact"),
        "aten::_upsample_nearest_exact1d",
    ),
    "linear1d_x1.7": (lambda t: F.interpolate(t, scale_factor=1.7, mode="linear"), "aten::upsample_linear1d"),
    "linear1d_size_20_corners": (
        lambda t: F.interpolate(t, size=20, mode="linear", align_corners=True),
        "aten::upsample_linear1d",
    ),
}


def _leaf(layout: str, special: bool = False, one_d: bool = False) -> tuple[torch.Tensor, object]:
    """The leaf tensor of a case and the view of it the op sees ([2, 5, 9, 11] either way;
    [2, 5, 11] for a 1-d case)."""
    g = torch.Generator().manual_seed(0)
    if layout == "sliced":  # offset, and a width stride of 2
        if one_d:
            return torch.randn(3, 7, 22, generator=g), lambda t: t[1:, 1:6, ::2]
        base = torch.randn(3, 7, 10, 22, generator=g)
        return base, lambda t: t[1:, 1:6, 1:, ::2]
    x = torch.randn((2, 5, 11) if one_d else (2, 5, 9, 11), generator=g)
    if special:  # NaN and infinities propagate as on CPU
        x.view(10, -1)[1, 3] = float("nan")
        x.view(10, -1)[7, 4] = float("inf")
        x.view(10, -1)[8, 0] = float("-inf")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    return x, lambda t: t


def _run(fn, view, leaf, dev, style):
    """Forward and backward of fn(view(leaf)) on dev in style (CPU for dev "cpu"): y, grad
    (on CPU), and their strides."""
    x = leaf.detach().clone(memory_format=torch.preserve_format)
    if style == "to" and dev != "cpu":
        x = x.to(dev)
    x.requires_grad_()

    def body():
        y = fn(view(x))
        w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
        (y * w.to(y.device)).sum().backward()
        return y.detach().cpu(), x.grad.cpu(), y.stride(), x.grad.stride()

    if style == "mode" and dev != "cpu":
        with torch_fl.ral_mode(dev):
            return body()
    return body()


def _close(got, want, what):
    scale = max(want[torch.isfinite(want)].abs().max().item(), 1.0)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL * scale, equal_nan=True, msg=what)


def sweep_case(fn, x, dev, what):
    """One case of a slow sweep: fn(x)'s output and input gradient on dev against CPU's
    (`.to` style); where CPU raises (an empty output) the device must raise too. Returns
    (got, want), or None where CPU raised."""
    try:
        want = _run(fn, lambda t: t, x, "cpu", "to")
    except RuntimeError:
        with pytest.raises(RuntimeError):
            _run(fn, lambda t: t, x, dev, "to")
        return None
    got = _run(fn, lambda t: t, x, dev, "to")
    _close(got[0], want[0], what)
    _close(got[1], want[1], what)
    return got, want


def check(case: str, layout: str, style: str, dev: str, special: bool = False) -> dict:
    """Output and input gradient of a case on dev equal CPU's, both ops in the vendor tier and
    none in the cpu tier; returns the OpenCL counter increments of the device run (ral:1)."""
    fn, op = (CASES | CASES_1D)[case]
    leaf, view = _leaf(layout, special, case in CASES_1D)
    want = _run(fn, view, leaf, "cpu", style)
    if dev == DEV:
        torch.ral.synchronize(DEV)
        a = counters()
    with torch_fl.coverage() as cov:
        got = _run(fn, view, leaf, dev, style)
    _close(got[0], want[0], f"{case} output")
    _close(got[1], want[1], f"{case} input gradient")
    if style == "to":  # laid out as CPU's (channels_last stays channels_last), so views work alike
        assert got[2:] == want[2:], (got[2:], want[2:])
    ran = cov.ops_in_tier("vendor")
    assert op in ran and f"{op}_backward" in ran, cov.counts
    assert not cov.ops_in_tier("cpu"), cov.counts
    if dev != DEV:
        return {}
    torch.ral.synchronize(DEV)
    b = counters()
    return {k: b[k] - a[k] for k in _NAMES}


@pytest.fixture(params=["host_path", "queued"])
def path(request):
    """ral:1 on the host path (the default on PoCL) or queued (`ral_opencl_inline(0)`); restored after."""
    if _SO is None:
        pytest.skip(_NO_OPENCL)
    if _SO.ral_opencl_inline(-1) < 0:
        pytest.skip(f"{DEV} has no host path (not a CPU device with unified host memory)")
    torch.ral.synchronize(DEV)
    before = _SO.ral_opencl_inline(1 if request.param == "host_path" else 0)
    yield request.param
    torch.ral.synchronize(DEV)
    _SO.ral_opencl_inline(before)


def _assert_path(path: str, c: dict, layout: str = "contiguous") -> None:
    if path == "host_path" and layout == "sliced":  # the view's slice_backward is queued; both ops ran on the host
        assert c["inline_ops"] >= 2, c
    elif path == "host_path":  # everything of this small case, pooling included, ran on the host
        assert c["kernels"] == 0 and c["inline_ops"] > 0, c
    else:
        assert c["kernels"] > 0, c


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_ral1_to_matches_cpu(case, layout, path):
    """`.to("ral:1")`: every case and layout on both paths."""
    _assert_path(path, check(case, layout, "to", DEV), layout)


@pytest.mark.parametrize("case", sorted(CASES))
def test_ral1_mode_matches_cpu(case, path):
    """`ral_mode("ral:1")` over CPU tensors: every case (channels_last input) on both paths."""
    _assert_path(path, check(case, "channels_last", "mode", DEV))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", ["max_k3s2p1", "avg_k3s1p1_pad", "avg_divisor", "adaptive_5x7", "bilinear_x1.7"])
def test_nan_and_inf_propagate_as_on_cpu(case, layout, path):
    """A NaN and two infinities in the input give CPU's NaN/inf pattern, forward and backward
    (channels_last: the host path's channels-last loops)."""
    _assert_path(path, check(case, layout, "to", DEV, special=True))


@pytest.mark.parametrize("layout", ["channels_last", "sliced"])
def test_max_pool_indices_are_laid_out_as_on_cpu(layout, path):
    """max_pool2d's values and indices on ral:1 equal CPU's, strides included (channels_last
    input: channels_last output and indices, as CPU gives), and the backward through a
    channels_last gradient."""
    leaf, view = _leaf(layout)
    want_y, want_i = F.max_pool2d(view(leaf), 3, 2, 1, return_indices=True)
    got_y, got_i = F.max_pool2d(view(leaf.to(DEV)), 3, 2, 1, return_indices=True)
    torch.testing.assert_close(got_y.cpu(), want_y, rtol=0, atol=0)
    assert torch.equal(got_i.cpu(), want_i)
    assert (got_y.stride(), got_i.stride()) == (want_y.stride(), want_i.stride())
    gy = torch.randn(want_y.shape, generator=torch.Generator().manual_seed(4)).contiguous(
        memory_format=torch.channels_last
    )
    x = view(leaf)
    want_g = torch.ops.aten.max_pool2d_with_indices_backward(gy, x, [3, 3], [2, 2], [1, 1], [1, 1], False, want_i)
    got_g = torch.ops.aten.max_pool2d_with_indices_backward(
        gy.to(DEV), view(leaf.to(DEV)), [3, 3], [2, 2], [1, 1], [1, 1], False, got_i
    )
    torch.testing.assert_close(got_g.cpu(), want_g, rtol=0, atol=0)
    assert got_g.stride() == want_g.stride()


def test_each_op_alone_launches_nothing_on_the_host_path(path):
    """Counted per op: on the host path each of the 10 ops is one host command and no OpenCL
    kernel (the stream drained first); queued, each one launches a kernel."""
    x = torch.randn(2, 3, 8, 10, generator=torch.Generator().manual_seed(2))
    xd = x.to(DEV)
    aten = torch.ops.aten
    calls = [
        (aten.avg_pool2d, lambda t: (t, [3, 3], [2, 2], [1, 1], True, False, None), [2, 3, 5, 6]),
        (aten._adaptive_avg_pool2d, lambda t: (t, [3, 4]), [2, 3, 3, 4]),
        (aten.upsample_nearest2d, lambda t: (t, [13, 17], None, None), [2, 3, 13, 17]),
        (aten.upsample_bilinear2d, lambda t: (t, [13, 17], False, None, None), [2, 3, 13, 17]),
        (aten._upsample_nearest_exact2d, lambda t: (t, [13, 17], None, None), [2, 3, 13, 17]),
    ]
    backward = {
        aten.avg_pool2d: lambda g, t: aten.avg_pool2d_backward(g, t, [3, 3], [2, 2], [1, 1], True, False, None),
        aten._adaptive_avg_pool2d: lambda g, t: aten._adaptive_avg_pool2d_backward(g, t),
        aten.upsample_nearest2d: lambda g, t: aten.upsample_nearest2d_backward(g, [13, 17], list(t.shape), None, None),
        aten._upsample_nearest_exact2d: lambda g, t: aten._upsample_nearest_exact2d_backward(
            g, [13, 17], list(t.shape), None, None
        ),
        aten.upsample_bilinear2d: lambda g, t: aten.upsample_bilinear2d_backward(
            g, [13, 17], list(t.shape), False, None, None
        ),
    }
    for op, args, out_shape in calls:
        gy = torch.randn(out_shape, generator=torch.Generator().manual_seed(3))
        _one_op(path, str(op), op, args(xd), args(x))
        _one_op(path, f"{op} backward", backward[op], (gy.to(DEV), xd), (gy, x))


def _one_op(path, name, fn, dev_args, cpu_args):
    """fn on DEV equals fn on CPU; one host command and no kernel on the host path, else kernels."""
    torch.ral.synchronize(DEV)
    a = counters()
    got = fn(*dev_args)
    b = counters()
    c = {k: b[k] - a[k] for k in _NAMES}
    _close(got.cpu(), fn(*cpu_args), name)
    if path == "host_path":
        assert c["kernels"] == 0 and c["inline_ops"] == 1, (name, c)
    else:
        assert c["kernels"] >= 1, (name, c)


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "special"])
@pytest.mark.parametrize("case", sorted(CASES_1D))
def test_ral1_1d_matches_cpu(case, layout, style, path):
    """The 1-d forms on ral:1, both styles, both paths, NaN and infinities included."""
    c = check(case, "contiguous" if layout == "special" else layout, style, DEV, special=layout == "special")
    _assert_path(path, c, layout)


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("layout", ["sliced", "special"])
@pytest.mark.parametrize("case", sorted(CASES_1D))
def test_ral0_1d_matches_cpu(case, layout, style):
    """The 1-d forms on ral:0."""
    check(case, "contiguous" if layout == "special" else layout, style, plugin_device("host"), layout == "special")


def run_queued(module: str, cases, extra: str = "") -> None:
    """In a `TORCH_FL_OPENCL_INLINE=0` subprocess (plain runtime buffers, every command queued):
    `module.check(case, layout, style, DEV)` for each case must launch kernels and no inline
    command; then the statements `extra` (module imported as `t`) run."""
    if _SO is None:
        pytest.skip(_NO_OPENCL)
    here = str(Path(__file__).resolve().parent)
    code = f"""
        import sys
        sys.path.insert(0, {here!r})
        import {module} as t
        assert t._SO.ral_opencl_inline(-1) == -1
        for case, layout, style in {list(cases)!r}:
            c = t.check(case, layout, style, t.DEV)
            assert c["kernels"] > 0 and c["inline_ops"] == 0, (case, c)
{textwrap.indent(textwrap.dedent(extra), " " * 8)}
        print("OK")
    """
    r = run_python(code, env={"TORCH_FL_OPENCL_INLINE": "0"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_queued_kernels_on_plain_runtime_buffers():
    """TORCH_FL_OPENCL_INLINE=0: the OpenCL kernels of every op match CPU forward and backward,
    in both styles, and launch kernels."""
    cases = [
        ("avg_k3s2p1_ceil_nopad", "sliced", "to"), ("avg_divisor", "contiguous", "mode"),
        ("adaptive_4x3", "channels_last", "to"), ("adaptive_up_13x12", "contiguous", "mode"),
        ("nearest_x2.5", "contiguous", "to"), ("nearest_size_18x7", "sliced", "mode"),
        ("bilinear_x1.7", "channels_last", "to"), ("bilinear_size_13x20_corners", "contiguous", "mode"),
        ("nearest_exact_x1.7", "sliced", "to"), ("linear1d_x1.7", "sliced", "to"),
        ("nearest1d_x2.5", "contiguous", "mode"),
    ]  # fmt: skip
    run_queued("test_opencl_pool_upsample", cases, 't.check("avg_k3s1p1_pad", "contiguous", "to", t.DEV, special=True)')


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_ral0_matches_cpu(case, style):
    """The host plugin (ral:0) on the same cases, channels_last input (the shared plane math)."""
    check(case, "channels_last", style, plugin_device("host"))


@pytest.mark.parametrize("which", ["host", "opencl"])
def test_bad_geometry_raises_and_the_device_keeps_working(which):
    """Padding over half the kernel and a zero divisor raise RuntimeError; the device still works."""
    dev = plugin_device(which)
    x = torch.randn(1, 2, 6, 6)
    with pytest.raises(RuntimeError, match="pad"):
        F.avg_pool2d(x.to(dev), 2, 1, padding=2)
    with pytest.raises(RuntimeError, match="divisor"):
        F.avg_pool2d(x.to(dev), 2, divisor_override=0)
    torch.testing.assert_close(F.avg_pool2d(x.to(dev), 2).cpu(), F.avg_pool2d(x, 2))


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 1e-2), (torch.bfloat16, 4e-2)])
def test_ral0_nearest_exact_half_types(dtype, tol):
    """ral:0 declares float16/bfloat16 for nearest-exact too: output bit-equal to CPU's half
    kernel (a copy), input gradient within tol of the largest value (the host kernel adds in
    float and rounds once, CPU's half kernel rounds per addition), vendor tier."""
    dev = plugin_device("host")
    fn, op = CASES["nearest_exact_size_5x20"]
    x = torch.randn(2, 5, 9, 11, generator=torch.Generator().manual_seed(4)).to(dtype)
    want = _run(fn, lambda t: t, x, "cpu", "to")
    with torch_fl.coverage() as cov:
        got = _run(fn, lambda t: t, x, dev, "to")
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    scale = want[1].float().abs().max().item()
    torch.testing.assert_close(got[1].float(), want[1].float(), rtol=0, atol=tol * scale)
    assert op in cov.ops_in_tier("vendor") and f"{op}_backward" in cov.ops_in_tier("vendor"), cov.counts


@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("style", ["to", "mode"])
def test_module_training_step_matches_cpu(which, style):
    """A CPU nn.Module with AvgPool2d, Upsample (nearest and bilinear) and AdaptiveAvgPool2d:
    loss and every parameter gradient equal CPU's (rtol/atol 1e-4: the convolutions add in other
    orders) with `model.to(dev)` and under `ral_mode(dev)`, the pooling and upsampling ops
    forward and backward in the vendor tier."""
    dev = plugin_device(which)
    nn = torch.nn
    torch.manual_seed(5)
    ref = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.AvgPool2d(2, ceil_mode=True),
        nn.Upsample(scale_factor=1.5, mode="bilinear"),
        nn.Conv2d(4, 4, 3),
        nn.Upsample(scale_factor=2, mode="nearest"),
        nn.AdaptiveAvgPool2d((3, 5)),
        nn.Flatten(),
        nn.Linear(60, 2),
    )
    x = torch.randn(2, 3, 11, 9, generator=torch.Generator().manual_seed(6))
    ref(x).square().sum().backward()
    model = copy.deepcopy(ref)
    model.zero_grad()
    with torch_fl.coverage() as cov:
        if style == "to":
            model = model.to(dev)
            loss = model(x.to(dev)).square().sum()
            loss.backward()
        else:
            with torch_fl.ral_mode(dev):
                loss = model(x).square().sum()
                loss.backward()
    torch.testing.assert_close(loss.detach().cpu(), ref(x).square().sum().detach(), rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-4, msg=name)
    ran = cov.ops_in_tier("vendor")
    for op in ("avg_pool2d", "upsample_bilinear2d", "upsample_nearest2d", "_adaptive_avg_pool2d"):
        assert f"aten::{op}" in ran and f"aten::{op}_backward" in ran, (op, cov.counts)
