"""Capability: 3-d pooling and upsampling (`max_pool3d_with_indices`, `avg_pool3d`,
`_adaptive_avg_pool3d`, `adaptive_max_pool3d`, `upsample_nearest3d`,
`_upsample_nearest_exact3d`, `upsample_trilinear3d` and their backward) runs
as a vendor kernel on both plugins with CPU's values, indices and gradients: ral:0 (host
plugin, plugins/host/pool3d.c over plugins/common/resample.c's ral_pool3, upsample.c over its
ral_upsample volumes; float32, float16, bfloat16) and ral:1 (OpenCL plugin,
plugins/opencl/pool.c and upsample.c; float32) on both of its paths, the host path over the
buffers' host memory on PoCL (inline_pool.c) and the queued kernels (kernels/pool.cl,
kernels/upsample.cl: `ral_opencl_inline(0)` in-process, and a subprocess with
`TORCH_FL_OPENCL_INLINE=0`).

Max pooling's values and indices must equal CPU's exactly (a max picks an element; first
maximum, NaN wins; indices flat per [D, H, W] volume), and so must nearest upsampling's output
(a copy); average pooling's and trilinear upsampling's output and every input gradient within
rtol 1e-5 / atol 1e-5 of the largest value (both sum in CPU's order; the backward is a gather
on the queued path; CPU's channels_last_3d trilinear kernel multiplies the three weights first,
a few ulps apart). Inputs: contiguous, channels_last_3d and sliced; in
`.to` style the strides of output and gradient must be CPU's (channels_last_3d stays
channels_last_3d). The coverage report must show both ops in the vendor tier and nothing in the
cpu tier. A max pooling backward index outside its volume raises (ral:0: the plugin's
RuntimeError; ral:1: IndexError) and the device keeps working.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_opencl_pool_upsample as base  # noqa: E402
from conftest import plugin_device  # noqa: E402
from test_opencl_pool_upsample import _SO, DEV, _assert_path, _close, _run, path  # noqa: E402,F401

_NAMES = getattr(base, "_NAMES", ())  # the OpenCL counters' names (none without the OpenCL plugin)

MAX = "aten::max_pool3d_with_indices"
AVG = "aten::avg_pool3d"
ADAPTIVE = "aten::_adaptive_avg_pool3d"
ADAPTIVE_MAX = "aten::adaptive_max_pool3d"
NEAREST = "aten::upsample_nearest3d"
EXACT = "aten::_upsample_nearest_exact3d"
TRILINEAR = "aten::upsample_trilinear3d"
PICKS = (MAX, ADAPTIVE_MAX, NEAREST, EXACT)  # outputs that pick an input element: equal CPU's exactly

# name: (fn over the [2, 3, 6, 7, 9] view of _leaf, aten op); the backward is f"{op}_backward"
CASES = {
    "max_k3s2p1": (lambda t: F.max_pool3d(t, 3, 2, 1), MAX),
    "max_rect_dilated_ceil": (
        lambda t: F.max_pool3d(t, (2, 3, 2), (1, 2, 1), (1, 1, 0), dilation=(2, 1, 2), ceil_mode=True),
        MAX,
    ),
    "max_overlap_k2s1": (lambda t: F.max_pool3d(t, 2, 1), MAX),  # windows overlap: gradients add
    "avg_k3s2p1_ceil_nopad": (lambda t: F.avg_pool3d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False), AVG),
    "avg_rect_ceil_pad": (lambda t: F.avg_pool3d(t, (3, 2, 3), (2, 1, 2), (1, 0, 1), ceil_mode=True), AVG),
    "avg_divisor": (lambda t: F.avg_pool3d(t, 2, 2, 1, divisor_override=3), AVG),
    "adaptive_3x4x5": (lambda t: F.adaptive_avg_pool3d(t, (3, 4, 5)), ADAPTIVE),
    "adaptive_up_8x9x10": (lambda t: F.adaptive_avg_pool3d(t, (8, 9, 10)), ADAPTIVE),  # windows overlap
    "adaptive_max_4x3x5": (lambda t: F.adaptive_max_pool3d(t, (4, 3, 5)), ADAPTIVE_MAX),  # windows overlap
    "adaptive_max_up_8x9x10": (lambda t: F.adaptive_max_pool3d(t, (8, 9, 10)), ADAPTIVE_MAX),
    "up_nearest_x2": (lambda t: F.interpolate(t, scale_factor=2, mode="nearest"), NEAREST),
    "up_nearest_size_4x9x5": (lambda t: F.interpolate(t, size=(4, 9, 5), mode="nearest"), NEAREST),  # down and up
    "up_exact_x1.7": (lambda t: F.interpolate(t, scale_factor=1.7, mode="nearest-exact"), EXACT),
    "up_exact_size_5x13x4": (lambda t: F.interpolate(t, size=(5, 13, 4), mode="nearest-exact"), EXACT),
    "up_tri_x1.5": (lambda t: F.interpolate(t, scale_factor=1.5, mode="trilinear"), TRILINEAR),
    "up_tri_corners_7x4x11": (
        lambda t: F.interpolate(t, size=(7, 4, 11), mode="trilinear", align_corners=True),
        TRILINEAR,
    ),
    "up_tri_given_2x0.5x1.3": (  # the scales given (recompute_scale_factor=False): 1 / scale as the steps
        lambda t: F.interpolate(t, scale_factor=(2.0, 0.5, 1.3), mode="trilinear", recompute_scale_factor=False),
        TRILINEAR,
    ),
    "up_tri_x1.05_same_size": (  # sizes equal, scale given: CPU copies (and its backward too)
        lambda t: F.interpolate(t, scale_factor=1.05, mode="trilinear"),
        TRILINEAR,
    ),
}


def _leaf(layout: str, special: bool = False) -> tuple[torch.Tensor, object]:
    """The leaf tensor of a case and the view of it the op sees ([2, 3, 6, 7, 9] either way)."""
    g = torch.Generator().manual_seed(0)
    if layout == "sliced":  # offset, and a width stride of 2
        return torch.randn(3, 4, 7, 8, 18, generator=g), lambda t: t[1:, 1:, 1:, 1:, ::2]
    x = torch.randn(2, 3, 6, 7, 9, generator=g)
    if special:  # NaN and infinities propagate as on CPU
        x.view(6, -1)[1, 30] = float("nan")
        x.view(6, -1)[4, 70] = float("inf")
        x.view(6, -1)[5, 0] = float("-inf")
    if layout == "channels_last_3d":
        x = x.contiguous(memory_format=torch.channels_last_3d)
    return x, lambda t: t


def check(case: str, layout: str, style: str, dev: str, special: bool = False) -> dict:
    """Output and input gradient of a case on dev equal CPU's (max pooling's output exactly),
    both ops in the vendor tier and none in the cpu tier; returns the OpenCL counter
    increments of a ral:1 run."""
    fn, op = CASES[case]
    leaf, view = _leaf(layout, special)
    want = _run(fn, view, leaf, "cpu", style)
    if dev == DEV:
        torch.ral.synchronize(DEV)
        a = base.counters()
    with torch_fl.coverage() as cov:
        got = _run(fn, view, leaf, dev, style)
    if op in PICKS:  # a max, or nearest upsampling, picks an element
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True, msg=f"{case} output")
    else:
        _close(got[0], want[0], f"{case} output")
    _close(got[1], want[1], f"{case} input gradient")
    if style == "to":  # laid out as CPU's (channels_last_3d stays channels_last_3d)
        assert got[2:] == want[2:], (got[2:], want[2:])
    ran = cov.ops_in_tier("vendor")
    assert op in ran and f"{op}_backward" in ran, cov.counts
    assert not cov.ops_in_tier("cpu"), cov.counts
    if dev != DEV:
        return {}
    torch.ral.synchronize(DEV)
    b = base.counters()
    return {k: b[k] - a[k] for k in _NAMES}


def indices_match(dev: str, layout: str, adaptive: bool = False) -> None:
    """max_pool3d's (adaptive: adaptive_max_pool3d's) values, flat per-volume indices and their
    strides equal CPU's; the backward op called directly with a channels_last_3d gradient equals
    CPU's, strides included."""
    leaf, view = _leaf(layout)
    op = ADAPTIVE_MAX if adaptive else MAX
    if adaptive:
        fwd = lambda t: F.adaptive_max_pool3d(t, (4, 5, 4), return_indices=True)  # noqa: E731
        bwd = torch.ops.aten.adaptive_max_pool3d_backward
    else:
        fwd = lambda t: F.max_pool3d(t, 3, 2, 1, return_indices=True)  # noqa: E731
        args = ([3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False)
        bwd = lambda g, x, i: torch.ops.aten.max_pool3d_with_indices_backward(g, x, *args, i)  # noqa: E731
    want_y, want_i = fwd(view(leaf))
    with torch_fl.coverage() as cov:
        got_y, got_i = fwd(view(leaf.to(dev)))
    assert op in cov.ops_in_tier("vendor") and not cov.ops_in_tier("cpu"), cov.counts
    torch.testing.assert_close(got_y.cpu(), want_y, rtol=0, atol=0)
    assert torch.equal(got_i.cpu(), want_i)
    assert (got_y.stride(), got_i.stride()) == (want_y.stride(), want_i.stride())
    gy = torch.randn(want_y.shape, generator=torch.Generator().manual_seed(4))
    gy = gy.contiguous(memory_format=torch.channels_last_3d)
    want_g = bwd(gy, view(leaf), want_i)
    with torch_fl.coverage() as cov:
        got_g = bwd(gy.to(dev), view(leaf.to(dev)), got_i)
    assert f"{op}_backward" in cov.ops_in_tier("vendor"), cov.counts
    _close(got_g.cpu(), want_g, "direct backward")
    assert got_g.stride() == want_g.stride()


@pytest.mark.parametrize("layout", ["contiguous", "channels_last_3d", "sliced"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_ral0_to_matches_cpu(case, layout):
    """`.to("ral:0")`: every case in every layout."""
    check(case, layout, "to", plugin_device("host"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_ral0_mode_matches_cpu(case):
    """`ral_mode("ral:0")` over CPU tensors: every case (channels_last_3d input)."""
    check(case, "channels_last_3d", "mode", plugin_device("host"))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last_3d", "sliced"])
@pytest.mark.parametrize(
    "case",
    [
        "max_rect_dilated_ceil",
        "max_overlap_k2s1",
        "avg_k3s2p1_ceil_nopad",
        "avg_divisor",
        "adaptive_up_8x9x10",
        "adaptive_max_4x3x5",
        "up_nearest_x2",
        "up_exact_x1.7",
        "up_tri_x1.5",
        "up_tri_corners_7x4x11",
    ],
)
def test_ral1_to_matches_cpu(case, layout, path):  # noqa: F811 (the imported fixture)
    """`.to("ral:1")`: cases in every layout on both paths."""
    _assert_path(path, check(case, layout, "to", DEV), layout)


@pytest.mark.parametrize(
    "case",
    [
        "max_k3s2p1",
        "avg_rect_ceil_pad",
        "adaptive_3x4x5",
        "adaptive_max_up_8x9x10",
        "up_nearest_size_4x9x5",
        "up_exact_size_5x13x4",
        "up_tri_given_2x0.5x1.3",
        "up_tri_x1.05_same_size",
    ],
)
def test_ral1_mode_matches_cpu(case, path):  # noqa: F811 (the imported fixture)
    """`ral_mode("ral:1")` over CPU tensors (channels_last_3d input) on both paths."""
    _assert_path(path, check(case, "channels_last_3d", "mode", DEV))


@pytest.mark.parametrize(
    "case",
    ["max_k3s2p1", "avg_k3s2p1_ceil_nopad", "adaptive_3x4x5", "adaptive_max_4x3x5", "up_nearest_x2", "up_tri_x1.5"],
)
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_nan_and_inf_as_on_cpu(case, which):
    """A NaN and two infinities give CPU's NaN/inf pattern, values and gradients (NaN wins a max)."""
    check(case, "contiguous", "to", plugin_device(which), special=True)


@pytest.mark.parametrize("layout", ["channels_last_3d", "sliced"])
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_indices_and_strides_as_on_cpu(which, layout):
    """Values, indices and strides of max_pool3d equal CPU's; the direct backward too."""
    indices_match(plugin_device(which), layout)
    indices_match(plugin_device(which), layout, adaptive=True)


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
def test_ral0_half_types(dtype, tol):
    """float16 / bfloat16 on ral:0 (computed in float, rounded once): max values and indices
    equal CPU's in the same dtype; outputs and gradients within tol of the largest value of
    CPU's float32 result over the same (rounded) input (CPU has no float16 avg_pool3d)."""
    dev = plugin_device("host")
    x = torch.randn(2, 3, 6, 7, 9, generator=torch.Generator().manual_seed(3)).to(dtype)
    want_y, want_i = F.max_pool3d(x, 3, 2, 1, return_indices=True)
    got_y, got_i = F.max_pool3d(x.to(dev), 3, 2, 1, return_indices=True)
    assert torch.equal(got_y.cpu(), want_y) and torch.equal(got_i.cpu(), want_i)
    want_y, want_i = F.adaptive_max_pool3d(x, (4, 3, 5), return_indices=True)
    got_y, got_i = F.adaptive_max_pool3d(x.to(dev), (4, 3, 5), return_indices=True)
    assert torch.equal(got_y.cpu(), want_y) and torch.equal(got_i.cpu(), want_i)
    for fn in (
        CASES["max_overlap_k2s1"][0],
        CASES["avg_rect_ceil_pad"][0],
        CASES["adaptive_up_8x9x10"][0],
        CASES["adaptive_max_up_8x9x10"][0],
    ):
        want = _run(fn, lambda t: t, x.float(), "cpu", "to")
        with torch_fl.coverage() as cov:
            got = _run(fn, lambda t: t, x, dev, "to")
        assert got[0].dtype == got[1].dtype == dtype
        for g, w in zip(got[:2], want[:2]):
            torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=tol * w.float().abs().max().item())
        assert not cov.ops_in_tier("cpu"), cov.counts


@pytest.mark.parametrize("which", ["host", "opencl"])
def test_unbatched_input_and_empty_batch(which):
    """A [C, D, H, W] input (one sample) gives CPU's values and gradients in the vendor tier; an
    empty batch gives CPU's empty shape."""
    dev = plugin_device(which)
    x = torch.randn(3, 5, 6, 7, generator=torch.Generator().manual_seed(6))
    for case in ("max_overlap_k2s1", "avg_k3s2p1_ceil_nopad", "adaptive_3x4x5", "adaptive_max_4x3x5"):
        fn, op = CASES[case]
        want = _run(fn, lambda t: t, x, "cpu", "to")
        with torch_fl.coverage() as cov:
            got = _run(fn, lambda t: t, x, dev, "to")
        _close(got[0], want[0], f"{case} output")
        _close(got[1], want[1], f"{case} input gradient")
        assert op in cov.ops_in_tier("vendor") and not cov.ops_in_tier("cpu"), cov.counts
        empty = torch.randn(0, 2, 6, 7, 9)
        assert fn(empty.to(dev)).shape == fn(empty).shape


def upsample_direct(dev: str) -> None:
    """The 3-d upsampling ops called directly with explicit output sizes and scales (the
    backward with a channels_last_3d gradient): CPU's values and strides, vendor tier."""
    x = torch.randn(2, 3, 4, 5, 6, generator=torch.Generator().manual_seed(7))
    calls = [  # (op, output size, arguments after it, tolerance: 0 for a pick)
        (torch.ops.aten.upsample_nearest3d, [6, 4, 9], (None, 0.8, None), 0),
        (torch.ops.aten._upsample_nearest_exact3d, [7, 10, 5], (1.75, 2.0, 0.9), 0),
        (torch.ops.aten.upsample_trilinear3d, [7, 9, 13], (False, 1.75, 1.8, 2.2), 1),
        (torch.ops.aten.upsample_trilinear3d, [3, 8, 11], (True, None, None, None), 1),
    ]
    for op, size, rest, tol in calls:
        backward = getattr(torch.ops.aten, f"{op._qualified_op_name.split('::')[1]}_backward")
        want = op(x, size, *rest)
        gy = torch.randn(want.shape, generator=torch.Generator().manual_seed(8))
        gy = gy.contiguous(memory_format=torch.channels_last_3d)
        want_g = backward(gy, size, list(x.shape), *rest)
        with torch_fl.coverage() as cov:
            got = op(x.to(dev), size, *rest)
            got_g = backward(gy.to(dev), size, list(x.shape), *rest)
        name = op._qualified_op_name  # as the coverage report names it
        assert {name, f"{name}_backward"} <= set(cov.ops_in_tier("vendor")), cov.counts
        assert not cov.ops_in_tier("cpu"), cov.counts
        if tol:
            _close(got.cpu(), want, f"{name} {size} output")
        else:
            torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
        _close(got_g.cpu(), want_g, f"{name} {size} gradient")
        assert (got.stride(), got_g.stride()) == (want.stride(), want_g.stride())


@pytest.mark.parametrize("which", ["host", "opencl"])
def test_upsample_called_directly_with_sizes_and_scales(which):
    """Explicit output sizes and scales (given scales differ from the size ratios), a
    channels_last_3d gradient into the backward ops."""
    upsample_direct(plugin_device(which))


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
def test_ral0_upsample_half_types(dtype, tol):
    """float16 / bfloat16 3-d upsampling on ral:0 (computed in float, rounded once): nearest's
    output equals CPU's in the same dtype; outputs and gradients within tol of the largest value
    of CPU's float32 result over the same (rounded) input; vendor tier, the dtype kept."""
    dev = plugin_device("host")
    x = torch.randn(2, 3, 6, 7, 9, generator=torch.Generator().manual_seed(3)).to(dtype)
    for case in ("up_nearest_size_4x9x5", "up_exact_x1.7", "up_tri_x1.5", "up_tri_corners_7x4x11"):
        fn, op = CASES[case]
        want = _run(fn, lambda t: t, x.float(), "cpu", "to")
        with torch_fl.coverage() as cov:
            got = _run(fn, lambda t: t, x, dev, "to")
        assert got[0].dtype == got[1].dtype == dtype
        if op in PICKS:
            assert torch.equal(got[0], fn(x)), case
        for g, w in zip(got[:2], want[:2]):
            torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=tol * w.float().abs().max().item())
        assert op in cov.ops_in_tier("vendor") and not cov.ops_in_tier("cpu"), cov.counts


_BAD_UPSAMPLES = {  # name: call over a [1, 2, 3, 4, 5] tensor that CPU refuses
    "zero output": lambda t: F.interpolate(t, size=(0, 4, 4), mode="nearest"),
    "zero output, trilinear": lambda t: F.interpolate(t, size=(2, 0, 4), mode="trilinear"),
    "zero output, nearest-exact": lambda t: F.interpolate(t, size=(2, 3, 0), mode="nearest-exact"),
    "empty input depth": lambda t: torch.ops.aten._upsample_nearest_exact3d(t[:, :, :0], [2, 3, 4], None, None, None),
    "no channels": lambda t: torch.ops.aten.upsample_nearest3d(t[:, :0], [2, 3, 4], None, None, None),
    "4-d input": lambda t: torch.ops.aten.upsample_trilinear3d(t[0], [2, 3, 4], False, None, None, None),
    "two output sizes": lambda t: torch.ops.aten.upsample_trilinear3d(t, [2, 3], False, None, None, None),
    "backward, 4 input sizes": lambda t: torch.ops.aten._upsample_nearest_exact3d_backward(
        t, [3, 4, 5], [1, 2, 4, 5], None, None, None
    ),
    "backward, zero input size": lambda t: torch.ops.aten.upsample_trilinear3d_backward(
        t, [3, 4, 5], [1, 2, 0, 4, 5], False, None, None, None
    ),
    "backward, gradient of another shape": lambda t: torch.ops.aten.upsample_nearest3d_backward(
        t, [3, 4, 6], [1, 2, 3, 4, 5], None, None, None
    ),
}


@pytest.mark.parametrize("which", ["host", "opencl"])
def test_upsample_bad_input_raises_as_on_cpu(which):
    """Each call CPU refuses raises CPU's exception type and message on the device (not a
    ZeroDivisionError, IndexError or TypeError from a decomposition); the device keeps working."""
    dev = plugin_device(which)
    x = torch.randn(1, 2, 3, 4, 5, generator=torch.Generator().manual_seed(9))
    for what, call in _BAD_UPSAMPLES.items():
        with pytest.raises(RuntimeError) as cpu_error:
            call(x)
        message = str(cpu_error.value).splitlines()[0]
        with pytest.raises(RuntimeError) as dev_error:
            call(x.to(dev)).cpu()
        assert str(dev_error.value).splitlines()[0] == message, what
    empty = torch.randn(0, 2, 3, 4, 5)  # an empty batch is allowed
    assert F.interpolate(empty.to(dev), size=(2, 3, 4), mode="trilinear").shape == (0, 2, 2, 3, 4)
    got = F.interpolate(x.to(dev), scale_factor=2, mode="trilinear").cpu()
    _close(got, F.interpolate(x, scale_factor=2, mode="trilinear"), "after the errors")


def _bad_backward(dev: str, bad: int, adaptive: bool = False) -> torch.Tensor:
    x = torch.randn(1, 2, 4, 4, 4)
    y, i = F.adaptive_max_pool3d(x, 2, return_indices=True) if adaptive else F.max_pool3d(x, 2, return_indices=True)
    i = i.clone()
    i[0, 1, 1, 0, 1] = bad
    if adaptive:
        return torch.ops.aten.adaptive_max_pool3d_backward(torch.ones_like(y).to(dev), x.to(dev), i.to(dev))
    args = ([2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False)
    return torch.ops.aten.max_pool3d_with_indices_backward(torch.ones_like(y).to(dev), x.to(dev), *args, i.to(dev))


def _still_works(dev: str) -> None:
    x = torch.randn(1, 2, 4, 4, 4)
    torch.testing.assert_close(F.max_pool3d(x.to(dev), 2).cpu(), F.max_pool3d(x, 2), rtol=0, atol=0)


def test_ral0_backward_index_outside_its_volume_raises():
    """ral:0: the plugin's error names op and reason; the device keeps working."""
    dev = plugin_device("host")
    for bad in (64, -3):
        with pytest.raises(RuntimeError, match="max_pool3d_with_indices_backward.*outside its input volume"):
            _bad_backward(dev, bad).cpu()
        with pytest.raises(RuntimeError, match="adaptive_max_pool3d_backward.*outside its input volume"):
            _bad_backward(dev, bad, adaptive=True).cpu()
    _still_works(dev)


def test_ral1_backward_index_outside_its_volume_raises(path):  # noqa: F811 (the imported fixture)
    """ral:1 on both paths: IndexError naming op, index and volume size (the queued kernel's
    fault record surfaces at the next sync); the device keeps working."""
    for bad in (99, -3):
        with pytest.raises(IndexError, match=f"max_pool3d_with_indices_backward: index {bad} is out of bounds.*64"):
            _bad_backward(DEV, bad).cpu()
        with pytest.raises(IndexError, match=f"adaptive_max_pool3d_backward: index {bad} is out of bounds.*64"):
            _bad_backward(DEV, bad, adaptive=True).cpu()
    _still_works(DEV)


def test_queued_kernels_on_plain_runtime_buffers():
    """TORCH_FL_OPENCL_INLINE=0 (plain runtime buffers): the OpenCL kernels match CPU in both
    styles, values, indices, gradients and strides, and launch kernels."""
    cases = [
        ("max_rect_dilated_ceil", "sliced", "to"), ("max_overlap_k2s1", "channels_last_3d", "to"),
        ("max_k3s2p1", "contiguous", "mode"), ("avg_k3s2p1_ceil_nopad", "sliced", "to"),
        ("avg_rect_ceil_pad", "channels_last_3d", "to"), ("avg_divisor", "contiguous", "mode"),
        ("adaptive_3x4x5", "sliced", "to"), ("adaptive_up_8x9x10", "channels_last_3d", "to"),
        ("adaptive_max_4x3x5", "sliced", "to"), ("adaptive_max_up_8x9x10", "contiguous", "mode"),
        ("up_nearest_x2", "sliced", "to"), ("up_nearest_size_4x9x5", "channels_last_3d", "mode"),
        ("up_exact_x1.7", "contiguous", "to"), ("up_exact_size_5x13x4", "sliced", "to"),
        ("up_tri_x1.5", "channels_last_3d", "to"), ("up_tri_corners_7x4x11", "sliced", "to"),
        ("up_tri_given_2x0.5x1.3", "contiguous", "mode"), ("up_tri_x1.05_same_size", "contiguous", "to"),
    ]  # fmt: skip
    extra = """
        t.check("max_k3s2p1", "contiguous", "to", t.DEV, special=True)
        t.indices_match(t.DEV, "channels_last_3d")
        t.check("adaptive_max_4x3x5", "contiguous", "to", t.DEV, special=True)
        t.indices_match(t.DEV, "channels_last_3d", adaptive=True)
        t.check("up_tri_x1.5", "contiguous", "to", t.DEV, special=True)
        t.upsample_direct(t.DEV)
    """
    base.run_queued("test_pool3d_kernels", cases, extra)


def _empty_window_indices(x, k, s, p, d, ceil, dev) -> bool:
    """Where a max window holds no input element (all padding, stepped past by the dilation),
    CPU's forward gives -inf and an index past the volume, and CPU's backward writes through
    it (out of bounds: not run here). The device gives the same forward, and its backward
    raises. True when that is the case (checked here)."""
    want_y, want_i = F.max_pool3d(x, k, s, p, d, ceil, return_indices=True)
    if not ((want_i < 0) | (want_i >= x[0, 0].numel())).any():
        return False
    got_y, got_i = F.max_pool3d(x.to(dev), k, s, p, d, ceil, return_indices=True)
    assert torch.equal(got_y.cpu(), want_y) and torch.equal(got_i.cpu(), want_i)
    with pytest.raises((RuntimeError, IndexError), match="outside its input volume|out of bounds"):
        args = ([k] * 3, [s] * 3, [p] * 3, [d] * 3, ceil)
        torch.ops.aten.max_pool3d_with_indices_backward(got_y, x.to(dev), *args, got_i).cpu()
    return True


def _sweep_volumes(seed: int):
    """The slow sweeps' inputs: ((D, H, W), layout, [2, 3, D, H, W] tensor) over four volumes
    (1x1x1 .. 7x2x6) in two layouts."""
    g = torch.Generator().manual_seed(seed)
    for D, H, W in [(1, 1, 1), (3, 5, 4), (7, 2, 6), (4, 4, 4)]:
        for layout in ("contiguous", "channels_last_3d"):
            x = torch.randn(2, 3, D, H, W, generator=g)
            if layout == "channels_last_3d":
                x = x.contiguous(memory_format=torch.channels_last_3d)
            yield (D, H, W), layout, x


@pytest.mark.slow
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_sweep_windows_and_layouts(which):
    """Sweep: kernel 1..3, stride 1..3, padding up to half the kernel, dilation 1..2 (max),
    ceil_mode, count_include_pad, adaptive outputs 2..9 per axis, over volumes 1..7 in two
    layouts, against CPU."""
    dev = plugin_device(which)
    for (D, H, W), layout, x in _sweep_volumes(5):
        for k in (1, 2, 3):
            for s in (1, 2, 3):
                for p in range(k // 2 + 1):
                    for ceil in (False, True):
                        fns = []
                        for d in (1, 2):
                            try:
                                if _empty_window_indices(x, k, s, p, d, ceil, dev):
                                    continue
                            except RuntimeError:  # an empty output: handled below
                                pass
                            fns.append(lambda t, d=d: F.max_pool3d(t, k, s, p, d, ceil))  # noqa: B023
                        fns += [
                            lambda t, c=c: F.avg_pool3d(t, k, s, p, ceil, c)  # noqa: B023
                            for c in (False, True)
                        ]
                        if p == 0 and not ceil:  # adaptive: outputs 1..9 per axis (1x1x1 is a mean)
                            size = (k + s, 2 * k + 1, 3 * s)
                            fns.append(lambda t, o=size: F.adaptive_avg_pool3d(t, o))  # noqa: B023
                            fns.append(lambda t, o=size: F.adaptive_max_pool3d(t, o))  # noqa: B023
                        for n, fn in enumerate(fns):
                            what = f"{D}x{H}x{W} {layout} k{k} s{s} p{p} ceil={ceil} fn{n}"
                            base.sweep_case(fn, x, dev, what)  # an empty output: the device raises too


@pytest.mark.slow
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_sweep_upsampling(which):
    """Sweep: volumes 1x1x1..7x2x6 in two layouts, to output sizes 1..11 per axis (down, equal,
    up) and by given scales, nearest / nearest-exact / trilinear (align_corners both ways),
    forward and backward against CPU."""
    dev = plugin_device(which)
    for (D, H, W), layout, x in _sweep_volumes(11):
        sizes = [(1, 1, 1), (D, H, W), (2 * D, H + 1, 3), (11, 2, 2 * W + 1)]
        for size in sizes:
            fns = [lambda t, m=m: F.interpolate(t, size=size, mode=m) for m in ("nearest", "nearest-exact")]  # noqa: B023
            fns += [
                lambda t, a=a: F.interpolate(t, size=size, mode="trilinear", align_corners=a)  # noqa: B023
                for a in (False, True)
            ]
            for n, fn in enumerate(fns):
                what = f"{D}x{H}x{W} {layout} -> {size} fn{n}"
                got, want = base.sweep_case(fn, x, dev, what)
                if n < 2:  # nearest picks an element
                    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, msg=what)
        for scale in (0.6, 1.3, 2.0):
            fn = lambda t, s=scale: F.interpolate(t, scale_factor=s, mode="trilinear", recompute_scale_factor=False)  # noqa: E731
            base.sweep_case(fn, x, dev, f"{D}x{H}x{W} {layout} x{scale}")  # 0.6 x 1: raises as CPU
