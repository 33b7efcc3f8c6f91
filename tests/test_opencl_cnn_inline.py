"""Capability: on an OpenCL CPU runtime whose buffers are host memory (PoCL), convolutions (on
oneDNN), batch norm and 2-d max pooling, forward and backward, run on the host over the
buffers' memory (plugins/opencl/inline_cnn.c) with CPU's results, and the queued OpenCL
kernels they replace there keep CPU's results too.

Each case runs forward and backward on ral:1 in both styles (`.to` and `ral_mode`) on both
paths: inline (the default) and queued (`ral_opencl_inline(0)` in-process; a subprocess with
`TORCH_FL_OPENCL_INLINE=0`, plain runtime buffers; one with `TORCH_FL_OPENCL_DNNL=0`, where
convolutions take the OpenCL kernels and batch norm stays on the host), and compares the output, every gradient
and the running statistics with PyTorch's CPU result (rtol/atol 1e-4: oneDNN and the host
loops add in other orders than CPU; max-pooling values and indices exactly). The plugin's
counters (`ral_opencl_counters`) say which path ran: inline, the whole forward and backward
makes no OpenCL kernel launch; queued, it does.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import dnnl_loads, run_python  # noqa: E402

# The OpenCL device (skips without one, or when it is not a CPU runtime) and the plugin's counters.
from test_opencl_latency import _NAMES, _SO, DEV, counters  # noqa: E402

_SO.ral_opencl_inline.restype = ctypes.c_int
TOL = {"rtol": 1e-4, "atol": 1e-4}


@pytest.fixture(params=["inline", "queued"])
def path(request):
    """Inline (the default) or queued (`ral_opencl_inline(0)`); restored afterwards."""
    if _SO.ral_opencl_inline(-1) < 0:
        pytest.skip(f"{DEV} cannot run commands inline (not a CPU device with unified host memory)")
    if request.param == "inline" and not dnnl_loads():
        pytest.skip("libdnnl.so.2 does not load here: convolutions keep the OpenCL kernels")
    torch.ral.synchronize(DEV)
    before = _SO.ral_opencl_inline(1 if request.param == "inline" else 0)
    yield request.param
    torch.ral.synchronize(DEV)
    _SO.ral_opencl_inline(before)


def _run(style: str, dev: str, fn, tensors, params):
    """fn(*tensors) forward and backward (loss: a fixed random weighting of every output) on `dev`
    in `style`, or on CPU (dev "cpu"): (outputs, input grads, param grads, params after), on CPU."""
    ts = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in tensors]
    ps = [p.detach().clone().requires_grad_(True) for p in params]
    if style == "to" and dev != "cpu":
        ts = [t.detach().to(dev).requires_grad_(t.requires_grad) for t in ts]
        ps = [p.detach().to(dev).requires_grad_(True) for p in ps]

    def body():
        outs = fn(*ts, *ps)
        outs = outs if isinstance(outs, tuple) else (outs,)
        g = torch.Generator().manual_seed(7)
        loss = sum((o * torch.randn(o.shape, generator=g).to(o.device)).sum() for o in outs if o.is_floating_point())
        loss.backward()
        return outs

    if style == "mode" and dev != "cpu":
        with torch_fl.ral_mode(dev):
            outs = body()
    else:
        outs = body()
    home = [o.detach().cpu() for o in outs]
    return (
        home,
        [t.grad.cpu() for t in ts if t.requires_grad],
        [p.grad.cpu() for p in ps],
        [p.detach().cpu() for p in ps],
    )


def _check(style, fn, tensors, params=(), exact_outputs=False, want_kernels=None):
    """Compare fn on DEV in `style` with CPU; returns the counter increments of the DEV run."""
    want = _run(style, "cpu", fn, tensors, params)
    torch.ral.synchronize(DEV)
    a = counters()
    got = _run(style, DEV, fn, tensors, params)
    torch.ral.synchronize(DEV)
    b = counters()
    for w, g in zip(want[0], got[0]):
        if exact_outputs or not w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        else:
            torch.testing.assert_close(g, w, **TOL)
    assert [len(x) for x in got] == [len(x) for x in want]
    for w, g in zip(want[1] + want[2] + want[3], got[1] + got[2] + got[3]):
        torch.testing.assert_close(g, w, **TOL)
    return {k: b[k] - a[k] for k in _NAMES}


def _assert_path(path, c):
    """Inline: no kernel was launched and host commands ran; queued: kernels were launched."""
    if path == "inline":
        assert c["kernels"] == 0 and c["inline_ops"] > 0, c
    else:
        assert c["kernels"] > 0, c


def _conv_inputs(dim, cin, layout):
    g = torch.Generator().manual_seed(1)
    shape = (3, cin) + (9,) * dim
    if layout == "sliced":  # offset and non-unit last stride
        x = torch.randn(3, cin + 2, *((19,) * dim), generator=g)[:, 1 : cin + 1, ..., ::2][..., : shape[-1]]
        if dim == 2:
            x = x[:, :, 1:10, :]
        assert not x.is_contiguous() and tuple(x.shape) == shape
        return x
    x = torch.randn(shape, generator=g)
    return x.to(memory_format=torch.channels_last) if layout == "channels_last" else x


# (dim, cin, cout, kernel, stride, padding, dilation, groups, bias, layout)
CONV_CASES = {
    "2d_3x3_pad1_bias": (2, 4, 6, 3, 1, 1, 1, 1, True, "contiguous"),
    "2d_stride2_nobias": (2, 4, 8, 3, 2, 0, 1, 1, False, "contiguous"),
    "2d_dilation2_groups2": (2, 4, 6, 3, 1, 2, 2, 2, True, "contiguous"),
    "2d_depthwise_x2": (2, 6, 12, 3, 1, 1, 1, 6, True, "contiguous"),
    "2d_channels_last": (2, 4, 6, 3, 1, 1, 1, 1, True, "channels_last"),
    "2d_sliced_input": (2, 4, 6, 3, 2, 1, 1, 1, False, "sliced"),
    "1d_stride2_pad2": (1, 4, 6, 5, 2, 2, 1, 1, True, "contiguous"),
    "1d_dilation3_groups2": (1, 4, 4, 3, 1, 0, 3, 2, False, "sliced"),
}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_convolution_matches_cpu(case, style, path):
    """Output, input, weight and bias gradients of a convolution equal CPU's on both paths."""
    dim, cin, cout, k, s, p, d, groups, bias, layout = CONV_CASES[case]
    g = torch.Generator().manual_seed(2)
    x = _conv_inputs(dim, cin, layout)
    w = torch.randn((cout, cin // groups) + (k,) * dim, generator=g) * 0.3
    params = [w, torch.randn(cout, generator=g)] if bias else [w]
    conv = F.conv2d if dim == 2 else F.conv1d

    def fn(x, w, b=None):
        return conv(x, w, b, stride=s, padding=p, dilation=d, groups=groups)

    c = _check(style, fn, [x], params)
    _assert_path(path, c)


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("rank", [4, 3], ids=["2d", "1d"])
def test_batch_norm_matches_cpu(rank, training, style, path):
    """Output, input/weight/bias gradients and the running statistics equal CPU's."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn((4, 5, 6, 7)[:rank], generator=g) * 2 + 1
    w, b = torch.rand(5, generator=g) + 0.5, torch.randn(5, generator=g)
    rm0, rv0 = torch.randn(5, generator=g), torch.rand(5, generator=g) + 0.5
    stats = []  # (running_mean, running_var) of the CPU run, then of the device run

    def fn(x, w, b):
        rm, rv = rm0.clone().to(x.device), rv0.clone().to(x.device)
        y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.3, eps=1e-4)
        stats.append((rm, rv))
        return y

    c = _check(style, fn, [x], [w, b])
    _assert_path(path, c)
    (cpu_rm, cpu_rv), (dev_rm, dev_rv) = stats
    torch.testing.assert_close(dev_rm.cpu(), cpu_rm, **TOL)
    torch.testing.assert_close(dev_rv.cpu(), cpu_rv, **TOL)
    if training:  # updated, not just copied
        assert not torch.equal(cpu_rm, rm0)


# (kernel, stride, padding, dilation, ceil_mode)
POOL_CASES = {"k3s1p1_overlapping": (3, 1, 1, 1, False), "k2s2_ceil_dilated": (2, 2, 0, 2, True)}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("case", list(POOL_CASES))
def test_max_pool_matches_cpu(case, style, path):
    """Values and indices bit-equal to CPU's (a NaN included), grad_input equal to CPU's."""
    k, s, p, d, ceil = POOL_CASES[case]
    x = torch.randn(2, 3, 9, 11, generator=torch.Generator().manual_seed(4))
    x[0, 1, 2, 3] = float("nan")

    def fn(x):
        return F.max_pool2d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)

    c = _check(style, fn, [x], exact_outputs=True)
    _assert_path(path, c)


def test_cnn_op_after_queued_work_waits_for_it(path):
    """A convolution whose input a queued kernel has not written yet (an `exp`, which has no
    inline form, held behind the stream's batch gate) sees that kernel's result: the host path
    drains the stream (a finish) before it reads the buffer."""
    x = torch.randn(2, 16, 64, 64, generator=torch.Generator().manual_seed(5)) * 0.5
    w = torch.randn(8, 16, 3, 3, generator=torch.Generator().manual_seed(6)) * 0.1
    want = F.conv2d(torch.exp(x), w, padding=1)
    xd, wd = x.to(DEV), w.to(DEV)
    torch.ral.synchronize(DEV)
    a = counters()
    got = F.conv2d(torch.exp(xd), wd, padding=1)
    b = counters()
    torch.testing.assert_close(got.cpu(), want, **TOL)
    c = {k: b[k] - a[k] for k in _NAMES}
    if path == "inline":  # the exp queued, the stream drained, the convolution on the host
        assert c["kernels"] == 1 and c["finishes"] == 1 and c["inline_ops"] == 1, c


def test_environment_switches_keep_the_opencl_kernels():
    """TORCH_FL_OPENCL_INLINE=0 (plain runtime buffers, every command queued): the conv, batch
    norm and pooling kernels run on the device and match CPU, forward and backward.
    TORCH_FL_OPENCL_DNNL=0: convolutions take the OpenCL kernels, batch norm stays on the host."""
    here = str(Path(__file__).resolve().parent)
    inline_off = f"""
        import sys
        sys.path.insert(0, {here!r})
        import test_opencl_cnn_inline as t
        assert t._SO.ral_opencl_inline(-1) == -1
        t.test_convolution_matches_cpu("2d_dilation2_groups2", "to", "queued")
        t.test_convolution_matches_cpu("1d_stride2_pad2", "mode", "queued")
        t.test_batch_norm_matches_cpu(4, True, "to", "queued")
        t.test_batch_norm_matches_cpu(3, False, "mode", "queued")
        t.test_max_pool_matches_cpu("k3s1p1_overlapping", "to", "queued")
        print("OK")
    """
    dnnl_off = f"""
        import sys
        sys.path.insert(0, {here!r})
        import test_opencl_cnn_inline as t
        assert t._SO.ral_opencl_inline(-1) == 1
        t.test_convolution_matches_cpu("2d_3x3_pad1_bias", "to", "queued")
        t.test_batch_norm_matches_cpu(4, True, "to", "inline")
        print("OK")
    """
    for code, env in ((inline_off, {"TORCH_FL_OPENCL_INLINE": "0"}), (dnnl_off, {"TORCH_FL_OPENCL_DNNL": "0"})):
        r = run_python(code, env=env)
        assert r.returncode == 0 and "OK" in r.stdout, (env, r.stdout + r.stderr)
