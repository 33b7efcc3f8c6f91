"""Capability: adaptive max pooling (`adaptive_max_pool2d` and its backward; also what
`F.adaptive_max_pool1d` reaches) runs as a vendor kernel on both plugins with CPU's values,
indices and gradients: ral:0 (host plugin, plugins/host/pool2d.c; float32, float16, bfloat16)
and ral:1 (OpenCL plugin, plugins/opencl/pool.c; float32) on both of its paths, the host path
over the buffers' host memory on PoCL (inline_cnn.c) and the queued kernels (kernels/pool.cl:
`ral_opencl_inline(0)` in-process, and a subprocess with `TORCH_FL_OPENCL_INLINE=0`).

Values and indices must equal CPU's exactly (a max picks an element; first maximum, NaN wins);
input gradients within rtol 1e-5 / atol 1e-5 of the largest value (both add each output's
gradient at its index in output order, as CPU does). Inputs: contiguous, channels_last and
sliced; in `.to` style the strides of output, indices and gradient must be CPU's. The
coverage report must show both ops in the vendor tier and nothing in the cpu tier.
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
from test_opencl_pool_upsample import _SO, DEV, _assert_path, _close, _leaf, _run, path  # noqa: E402,F401

_NAMES = getattr(base, "_NAMES", ())  # the OpenCL counters' names (none without the OpenCL plugin)

OP = "aten::adaptive_max_pool2d"
BICUBIC = "aten::upsample_bicubic2d"

# name: (fn over the [2, 5, 9, 11] (1-d: [2, 5, 11]) view of _leaf, aten op)
CASES = {
    "amax_4x3": (lambda t: F.adaptive_max_pool2d(t, (4, 3)), OP),
    "amax_5x7": (lambda t: F.adaptive_max_pool2d(t, (5, 7)), OP),
    "amax_up_13x12": (lambda t: F.adaptive_max_pool2d(t, (13, 12)), OP),  # windows overlap: gradients add
    "amax_none_3": (lambda t: F.adaptive_max_pool2d(t, (None, 3)), OP),
    "bicubic_x1.7": (lambda t: F.interpolate(t, scale_factor=1.7, mode="bicubic"), BICUBIC),
    "bicubic_x0.6_corners": (
        lambda t: F.interpolate(t, scale_factor=0.6, mode="bicubic", align_corners=True),
        BICUBIC,
    ),
    "bicubic_size_13x20_corners": (
        lambda t: F.interpolate(t, size=(13, 20), mode="bicubic", align_corners=True),
        BICUBIC,
    ),
    "bicubic_size_4x30": (lambda t: F.interpolate(t, size=(4, 30), mode="bicubic"), BICUBIC),  # down along H
    "bicubic_x1.05_same_size": (  # sizes equal, scale given: CPU's backward copies the gradient
        lambda t: F.interpolate(t, scale_factor=1.05, mode="bicubic"),
        BICUBIC,
    ),
    "bilinear_x1.05_same_size": (  # sizes equal, scale given: CPU copies (compute_source_index_and_lambda)
        lambda t: F.interpolate(t, scale_factor=1.05, mode="bilinear"),
        "aten::upsample_bilinear2d",
    ),
    "bicubic_x2_given": (  # the scale given (recompute_scale_factor=False): 1 / 2 as the step
        lambda t: F.interpolate(t, scale_factor=2.0, mode="bicubic", recompute_scale_factor=False),
        BICUBIC,
    ),
}
CASES_1D = {
    "amax1d_4": (lambda t: F.adaptive_max_pool1d(t, 4), OP),
    "amax1d_up_15": (lambda t: F.adaptive_max_pool1d(t, 15), OP),
}


def _same_layout(got, want) -> bool:
    """Whether output and gradient strides equal CPU's in every dimension of size > 1 (a size-1
    dimension's stride is arbitrary; torch_fl and CPU pick different ones for 1x1 planes)."""
    return all(
        [s for s, n in zip(g, t.shape) if n > 1] == [s for s, n in zip(w, t.shape) if n > 1]
        for g, w, t in zip(got[2:], want[2:], want[:2])
    )


def check(case: str, layout: str, style: str, dev: str, special: bool = False) -> dict:
    """Output and input gradient of a case on dev equal CPU's (max pooling's output exactly),
    both ops in the vendor tier and none in the cpu tier; returns the OpenCL counter
    increments of a ral:1 run."""
    fn, op = (CASES | CASES_1D)[case]
    leaf, view = _leaf(layout, special, case in CASES_1D)
    want = _run(fn, view, leaf, "cpu", style)
    if dev == DEV:
        torch.ral.synchronize(DEV)
        a = base.counters()
    with torch_fl.coverage() as cov:
        got = _run(fn, view, leaf, dev, style)
    if op == OP:  # a max picks an element
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True, msg=f"{case} output")
    else:  # CPU's build may fuse the multiply-adds: a few ulps
        _close(got[0], want[0], f"{case} output")
    _close(got[1], want[1], f"{case} input gradient")
    if style == "to":
        assert got[2:] == want[2:], (got[2:], want[2:])
    ran = cov.ops_in_tier("vendor")
    assert op in ran and f"{op}_backward" in ran, cov.counts
    assert not cov.ops_in_tier("cpu"), cov.counts
    if dev != DEV:
        return {}
    torch.ral.synchronize(DEV)
    b = base.counters()
    return {k: b[k] - a[k] for k in _NAMES}


def indices_match(dev: str, layout: str, size=(4, 3)) -> None:
    """Values, flat per-plane indices and their strides equal CPU's; the backward op called
    directly with a channels_last gradient equals CPU's, strides included."""
    leaf, view = _leaf(layout)
    want_y, want_i = F.adaptive_max_pool2d(view(leaf), size, return_indices=True)
    with torch_fl.coverage() as cov:
        got_y, got_i = F.adaptive_max_pool2d(view(leaf.to(dev)), size, return_indices=True)
    assert OP in cov.ops_in_tier("vendor") and not cov.ops_in_tier("cpu"), cov.counts
    torch.testing.assert_close(got_y.cpu(), want_y, rtol=0, atol=0)
    assert torch.equal(got_i.cpu(), want_i)
    assert (got_y.stride(), got_i.stride()) == (want_y.stride(), want_i.stride())
    gy = torch.randn(want_y.shape, generator=torch.Generator().manual_seed(4))
    gy = gy.contiguous(memory_format=torch.channels_last)
    want_g = torch.ops.aten.adaptive_max_pool2d_backward(gy, view(leaf), want_i)
    with torch_fl.coverage() as cov:
        got_g = torch.ops.aten.adaptive_max_pool2d_backward(gy.to(dev), view(leaf.to(dev)), got_i)
    assert f"{OP}_backward" in cov.ops_in_tier("vendor"), cov.counts
    _close(got_g.cpu(), want_g, "direct backward")
    assert got_g.stride() == want_g.stride()


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
@pytest.mark.parametrize("case", ["amax_5x7", "amax_up_13x12", "bicubic_x1.7", "bicubic_size_13x20_corners"])
def test_ral1_to_matches_cpu(case, layout, path):  # noqa: F811 (the imported fixture)
    """`.to("ral:1")`: 2-d cases in every layout on both paths."""
    _assert_path(path, check(case, layout, "to", DEV), layout)


@pytest.mark.parametrize(
    "case",
    [
        "amax_4x3",
        "amax_none_3",
        "amax1d_up_15",
        "bicubic_x0.6_corners",
        "bicubic_x2_given",
        "bicubic_x1.05_same_size",
        "bilinear_x1.05_same_size",
    ],
)
def test_ral1_mode_matches_cpu(case, path):  # noqa: F811 (the imported fixture)
    """`ral_mode("ral:1")` over CPU tensors (channels_last 2-d input, a 1-d case) on both paths."""
    _assert_path(path, check(case, "contiguous" if case in CASES_1D else "channels_last", "mode", DEV))


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize(
    "case",
    [
        "amax_5x7",
        "amax_up_13x12",
        "amax1d_4",
        "bicubic_x1.7",
        "bicubic_x0.6_corners",
        "bicubic_size_4x30",
        "bicubic_x1.05_same_size",
        "bilinear_x1.05_same_size",
    ],
)
def test_ral0_matches_cpu(case, style):
    """ral:0 in both styles (2-d: channels_last, 1-d: sliced)."""
    check(case, "sliced" if case in CASES_1D else "channels_last", style, plugin_device("host"))


@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("case", ["amax_5x7", "bicubic_x1.7"])
def test_nan_and_inf_as_on_cpu(case, which, layout):
    """A NaN and two infinities: CPU's values (max: picked; bicubic: spread to CPU's pattern),
    and the gradient lands where CPU's does."""
    check(case, layout, "to", plugin_device(which), special=True)


@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("layout", ["channels_last", "sliced"])
def test_indices_and_strides_as_on_cpu(which, layout):
    """Indices flat per plane, laid out as CPU's; the backward op with a channels_last gradient."""
    indices_match(plugin_device(which), layout)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 1e-2), (torch.bfloat16, 4e-2)])
def test_ral0_half_types(dtype, tol):
    """ral:0 float16/bfloat16: values and indices equal CPU's (a max is exact), the gradient
    (overlapping windows: added in float, rounded once) within tol of the largest; vendor tier."""
    dev = plugin_device("host")
    x = torch.randn(2, 5, 9, 11, generator=torch.Generator().manual_seed(4)).to(dtype)
    want_y, want_i = F.adaptive_max_pool2d(x, (13, 12), return_indices=True)
    gy = torch.randn(want_y.shape, generator=torch.Generator().manual_seed(5)).to(dtype)
    want_g = torch.ops.aten.adaptive_max_pool2d_backward(gy, x, want_i)
    with torch_fl.coverage() as cov:
        got_y, got_i = F.adaptive_max_pool2d(x.to(dev), (13, 12), return_indices=True)
        got_g = torch.ops.aten.adaptive_max_pool2d_backward(gy.to(dev), x.to(dev), got_i)
    assert torch.equal(got_y.cpu(), want_y) and torch.equal(got_i.cpu(), want_i)
    scale = want_g.float().abs().max().item()
    torch.testing.assert_close(got_g.cpu().float(), want_g.float(), rtol=0, atol=tol * scale)
    assert {OP, f"{OP}_backward"} <= set(cov.ops_in_tier("vendor")), cov.counts


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 1e-2), (torch.bfloat16, 4e-2)])
def test_ral0_bicubic_half_types(dtype, tol):
    """ral:0 float16/bfloat16 bicubic: output and input gradient within tol of the largest
    (computed in float, rounded once; CPU keeps half weights and rounds per step); vendor tier."""
    dev = plugin_device("host")
    x = torch.randn(2, 5, 9, 11, generator=torch.Generator().manual_seed(4)).to(dtype)
    fn = CASES["bicubic_x1.7"][0]
    want = _run(fn, lambda t: t, x, "cpu", "to")
    with torch_fl.coverage() as cov:
        got = _run(fn, lambda t: t, x, dev, "to")
    for g, w in zip(got[:2], want[:2]):
        torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=tol * w.float().abs().max().item())
    assert {BICUBIC, f"{BICUBIC}_backward"} <= set(cov.ops_in_tier("vendor")), cov.counts


def test_bad_input_raises_and_the_device_keeps_working():
    """An empty input plane raises a RuntimeError on both devices; on ral:0 an index outside
    its plane (a hand-made indices tensor) raises the plugin's error naming op and reason; both
    devices work afterwards."""
    x = torch.randn(1, 2, 6, 6)
    y, i = F.adaptive_max_pool2d(x, 3, return_indices=True)
    for which in ("host", "opencl"):
        dev = plugin_device(which)
        with pytest.raises(RuntimeError, match="non-zero size"):
            F.adaptive_max_pool2d(torch.randn(1, 2, 0, 4).to(dev), 2)
        # CPU's RuntimeError and message (sizes must be > 0; torch's meta kernel lets the call
        # through, the router's argument check raises CPU's error: dispatch/argument_checks.py)
        with pytest.raises(RuntimeError, match=r"sizes should be greater than 0, but got input \(H: 0, W: 4\)"):
            F.interpolate(torch.randn(1, 2, 0, 4).to(dev), size=(3, 3), mode="bicubic")
        if which == "host":
            with pytest.raises(RuntimeError, match="adaptive_max_pool2d_backward.*outside its input plane"):
                torch.ops.aten.adaptive_max_pool2d_backward(torch.ones(1, 2, 3, 3).to(dev), x.to(dev), (i + 36).to(dev))
        torch.testing.assert_close(F.adaptive_max_pool2d(x.to(dev), 3).cpu(), y, rtol=0, atol=0)


def test_queued_kernels_on_plain_runtime_buffers():
    """TORCH_FL_OPENCL_INLINE=0 (plain runtime buffers): the OpenCL kernels match CPU in both
    styles, values, indices, gradients and strides, and launch kernels."""
    cases = [
        ("amax_5x7", "sliced", "to"), ("amax_up_13x12", "channels_last", "to"),
        ("amax_4x3", "contiguous", "mode"), ("amax1d_up_15", "sliced", "to"),
        ("bicubic_x1.7", "sliced", "to"), ("bicubic_size_13x20_corners", "channels_last", "to"),
        ("bicubic_x0.6_corners", "contiguous", "mode"), ("bicubic_size_4x30", "contiguous", "to"),
    ]  # fmt: skip
    extra = """
        t.check("amax_up_13x12", "contiguous", "to", t.DEV, special=True)
        t.check("bicubic_x1.7", "contiguous", "to", t.DEV, special=True)
        t.indices_match(t.DEV, "channels_last", (13, 12))
    """
    base.run_queued("test_pool_upsample_extra", cases, extra)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_sweep_sizes_and_layouts(which):
    """Sweep: input sizes 1..12 against output sizes 1..14 in three layouts, values, indices
    and gradients against CPU."""
    dev = plugin_device(which)
    g = torch.Generator().manual_seed(7)
    for H, W in [(1, 1), (1, 7), (5, 1), (6, 6), (7, 12), (12, 5)]:
        for OH, OW in [(1, 1), (2, 3), (5, 5), (7, 2), (13, 14)]:
            for layout in ("contiguous", "channels_last", "sliced"):
                base = torch.randn(3, 4, H, 2 * W, generator=g)
                x = base[..., ::2] if layout == "sliced" else base[..., :W]
                if layout == "channels_last":
                    x = x.contiguous(memory_format=torch.channels_last)
                want_y, want_i = F.adaptive_max_pool2d(x, (OH, OW), return_indices=True)
                gy = torch.randn(want_y.shape, generator=g)
                want_g = torch.ops.aten.adaptive_max_pool2d_backward(gy, x, want_i)
                got_y, got_i = F.adaptive_max_pool2d(x.to(dev), (OH, OW), return_indices=True)
                got_g = torch.ops.aten.adaptive_max_pool2d_backward(gy.to(dev), x.to(dev), got_i)
                what = f"{H}x{W}->{OH}x{OW} {layout}"
                assert torch.equal(got_y.cpu(), want_y) and torch.equal(got_i.cpu(), want_i), what
                _close(got_g.cpu(), want_g, what)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_sweep_bicubic(which):
    """Sweep: bicubic between sizes 1..12 and 1..25, align_corners both ways, scales given or
    not, three layouts; output and input gradient against CPU."""
    dev = plugin_device(which)
    g = torch.Generator().manual_seed(8)
    for H, W in [(1, 1), (1, 7), (5, 1), (2, 3), (7, 12)]:
        for kw in [
            dict(size=(1, 1)),
            dict(size=(3, 25)),
            dict(size=(13, 2)),
            dict(scale_factor=1.3),
            dict(scale_factor=(2.5, 0.7), recompute_scale_factor=False),
        ]:
            for align in (False, True):
                for layout in ("contiguous", "channels_last", "sliced"):
                    wide = torch.randn(2, 3, H, 2 * W, generator=g)
                    x = wide[..., ::2] if layout == "sliced" else wide[..., :W]
                    if layout == "channels_last":
                        x = x.contiguous(memory_format=torch.channels_last)
                    fn = lambda t: F.interpolate(t, mode="bicubic", align_corners=align, **kw)  # noqa: E731,B023
                    what = f"{H}x{W} {kw} align={align} {layout}"
                    pair = base.sweep_case(fn, x, dev, what)
                    if pair is None:  # an empty output (0.7 x 1): the device raised too
                        continue
                    got, want = pair
                    # a 1x1 input plane is both layouts at once: torch_fl's copy keeps other
                    # strides than CPU's clone, so the output's layout may differ (not asserted)
                    assert H * W == 1 or _same_layout(got, want), what


@pytest.mark.parametrize("op", ["max_pool2d", "adaptive_max_pool2d"])
def test_ral1_backward_index_outside_its_plane_raises(op, path):  # noqa: F811 (the imported fixture)
    """ral:1's max pooling backward (a gather over each input's windows) dropped the gradient of
    an index outside its plane without a word; on both paths it now raises IndexError naming op,
    index and plane size (the queued kernel's fault record surfaces at the next sync), as ral:0
    raises, and the device keeps working."""
    x = torch.randn(1, 2, 4, 4)
    if op == "max_pool2d":
        y, i = F.max_pool2d(x, 2, return_indices=True)

        def backward(g, xx, ii):
            return torch.ops.aten.max_pool2d_with_indices_backward(g, xx, [2, 2], [2, 2], [0, 0], [1, 1], False, ii)

        name = "max_pool2d_with_indices_backward"
    else:
        y, i = F.adaptive_max_pool2d(x, 2, return_indices=True)

        def backward(g, xx, ii):
            return torch.ops.aten.adaptive_max_pool2d_backward(g, xx, ii)

        name = "adaptive_max_pool2d_backward"
    g = torch.ones_like(y)
    for bad in (99, -3):
        ii = i.clone()
        ii[0, 1, 1, 0] = bad
        with pytest.raises(IndexError, match=f"{name}: index {bad} is out of bounds for dimension 0 with size 16"):
            backward(g.to(DEV), x.to(DEV), ii.to(DEV)).cpu()
    torch.testing.assert_close(backward(g.to(DEV), x.to(DEV), i.to(DEV)).cpu(), backward(g, x, i), rtol=0, atol=0)
