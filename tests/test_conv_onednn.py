"""Convolutions on oneDNN (plugins/common/dnnl_conv.c): the host plugin's, and its fallback; the
16-bit ones of both plugins on oneDNN's bfloat16 primitives where the CPU has them.

A child process runs convolutions (forward, input and weight gradient, bias gradient) on ral:0
in both styles with `ONEDNN_VERBOSE=1`: oneDNN's own trace must show the plugin's library
(oneDNN v2, not PyTorch's bundled v3) running convolution forward, backward_data and
backward_weights primitives, and every result must match PyTorch's CPU convolution (rtol/atol
1e-4). The same child with `TORCH_FL_HOST_DNNL=0` must run no oneDNN convolution (conv.c's
im2col) and match CPU too. Skipped, saying so, where libdnnl.so.2 does not load (a build or
machine without Debian's libdnnl-dev): the plugin then always runs im2col, which
tests/test_conv_kernels.py covers.

bfloat16: on a CPU with native bfloat16 (AVX512-BF16 or AMX-BF16) the same child in bfloat16, on
ral:0 and on ral:1 (the OpenCL plugin's host path on PoCL), must run oneDNN's bfloat16
primitives on the tensors' own memory (no float32 convolution: that was the widening path, 3-6x
slower than CPU's bfloat16 convolution), and match CPU's bfloat16 convolution within two units
in the last place plus `2 * eps * sqrt(n)` for a reduction of n unit-scale terms.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import dnnl_loads, native_bf16, plugin_device, run_python

F32 = (1e-4, 1e-4)

# name, x shape, weight shape, conv2d/conv1d keyword arguments, channels_last input
CASES = [
    ("3x3", (4, 8, 12, 12), (16, 8, 3, 3), {"padding": 1}, False),
    ("3x3_channels_last", (4, 8, 12, 12), (16, 8, 3, 3), {"padding": 1}, True),
    ("1x1_stride2", (4, 8, 12, 12), (16, 8, 1, 1), {"stride": 2}, False),
    ("groups_dilation", (2, 8, 11, 11), (8, 4, 3, 3), {"padding": 2, "dilation": 2, "groups": 2}, False),
    ("1d", (3, 6, 40), (8, 6, 5), {"padding": 2, "stride": 2}, False),
]

_CHILD = """
import sys, torch, torch_fl
import torch.nn.functional as F
cases, dev, dt = {cases!r}, {dev!r}, getattr(torch, {dtype!r})
out = {{}}
for style in ("to", "mode"):
    for name, xs, ws, kw, cl in cases:
        g = torch.Generator().manual_seed(len(name))
        x, w = torch.randn(xs, generator=g).to(dt), torch.randn(ws, generator=g).to(dt)
        b = torch.randn(ws[0], generator=g).to(dt)
        if cl:
            x = x.to(memory_format=torch.channels_last)
        conv = F.conv1d if len(xs) == 3 else F.conv2d
        if style == "to":
            xd, wd, bd = (t.to(dev).requires_grad_() for t in (x, w, b))
            y = conv(xd, wd, bd, **kw)
            gy = torch.randn(y.shape, generator=g).to(dt).to(dev)
            y.backward(gy)
        else:
            xd, wd, bd = (t.clone().requires_grad_() for t in (x, w, b))
            with torch_fl.ral_mode(dev):
                y = conv(xd, wd, bd, **kw)
                y.backward(torch.randn(y.shape, generator=g).to(dt))
        out[style + "/" + name] = [t.detach().cpu() for t in (y, xd.grad, wd.grad, bd.grad)]
torch.ral.synchronize(dev)
torch.save(out, {path!r})
print("CHILD-DONE")
"""


def _expected(name, xs, ws, kw, cl, dtype=torch.float32):
    g = torch.Generator().manual_seed(len(name))
    x, w = torch.randn(xs, generator=g).to(dtype), torch.randn(ws, generator=g).to(dtype)
    b = torch.randn(ws[0], generator=g).to(dtype)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    x, w, b = (t.requires_grad_() for t in (x, w, b))
    conv = torch.nn.functional.conv1d if len(xs) == 3 else torch.nn.functional.conv2d
    y = conv(x, w, b, **kw)
    y.backward(torch.randn(y.shape, generator=g).to(dtype))
    return [y.detach(), x.grad, w.grad, b.grad]


def _run_child(tmp_path, env, dev="ral:0", dtype="float32"):
    path = str(tmp_path / "conv.pt")
    child = _CHILD.format(cases=CASES, path=path, dev=dev, dtype=dtype)
    out = run_python(child, env={"ONEDNN_VERBOSE": "1", **env})
    assert out.returncode == 0 and "CHILD-DONE" in out.stdout, out.stderr[-3000:]
    return out.stdout, torch.load(path)


def _tolerance(dtype, xs, ws):
    """float32: 1e-4. 16-bit: two ulps, plus 2 * eps * sqrt(n) for the longest reduction (the
    weight gradient's N * output positions, or an output's Cin/G * kernel terms)."""
    if dtype == torch.float32:
        return F32
    eps = torch.finfo(dtype).eps
    n = max(xs[0] * math.prod(xs[2:]), math.prod(ws[1:]))
    return 2 * eps, 2 * eps * math.sqrt(n)


def _check_values(results, dtype=torch.float32):
    for name, xs, ws, kw, cl in CASES:
        want = _expected(name, xs, ws, kw, cl, dtype)
        rtol, atol = _tolerance(dtype, xs, ws)
        for style in ("to", "mode"):
            got = results[style + "/" + name]
            for label, a, e in zip(("output", "grad_input", "grad_weight", "grad_bias"), got, want, strict=True):
                assert a.dtype == e.dtype, (style, name, label, a.dtype)
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, msg=f"{style} {name} {label}")


def _dnnl_conv_lines(stdout: str) -> list[str]:
    """oneDNN 2.x's trace lines of executed convolutions (PyTorch's bundled 3.x writes
    `onednn_verbose,v1,primitive,exec,...`, so its lines never match)."""
    return [ln for ln in stdout.splitlines() if ln.startswith("onednn_verbose,exec,cpu,convolution,")]


@pytest.mark.skipif(not dnnl_loads(), reason="libdnnl.so.2 does not load here (no libdnnl-dev): im2col only")
def test_float32_convolutions_run_on_onednn_and_match_cpu(tmp_path):
    """Forward, backward_data and backward_weights primitives of the plugin's oneDNN ran."""
    plugin_device("host")
    stdout, results = _run_child(tmp_path, {})
    assert "oneDNN v2" in stdout, "the plugin's oneDNN (Debian's 2.x) did not initialise"
    lines = _dnnl_conv_lines(stdout)
    for prop in ("forward_training", "backward_data", "backward_weights"):
        assert any(prop in ln for ln in lines), f"no oneDNN convolution {prop} ran"
    _check_values(results)


@pytest.mark.skipif(not dnnl_loads(), reason="libdnnl.so.2 does not load here: nothing to switch off")
def test_torch_fl_host_dnnl_0_runs_im2col_and_matches_cpu(tmp_path):
    """TORCH_FL_HOST_DNNL=0: no oneDNN convolution runs; conv.c's own kernel gives CPU's values."""
    plugin_device("host")
    stdout, results = _run_child(tmp_path, {"TORCH_FL_HOST_DNNL": "0"})
    assert _dnnl_conv_lines(stdout) == []
    _check_values(results)


@pytest.mark.skipif(not dnnl_loads(), reason="libdnnl.so.2 does not load here: both plugins widen to float32")
@pytest.mark.skipif(
    not native_bf16(), reason="no AVX512-BF16/AMX-BF16: oneDNN's bfloat16 convolution is reference code here"
)
@pytest.mark.parametrize("plugin", ["host", "opencl"])
def test_bfloat16_convolutions_run_on_onednn_bf16_and_match_cpu(tmp_path, plugin):
    """bfloat16 forward, backward_data and backward_weights run oneDNN's bfloat16 primitives on
    the tensors themselves (ral:0; ral:1 on PoCL's host path), no float32 convolution."""
    dev = plugin_device(plugin)
    stdout, results = _run_child(tmp_path, {}, dev=dev, dtype="bfloat16")
    lines = _dnnl_conv_lines(stdout)
    for prop in ("forward_training", "backward_data", "backward_weights"):
        ran = [ln for ln in lines if prop in ln]
        assert ran and all("src_bf16" in ln and "ref" not in ln.split(",")[4] for ln in ran), (prop, ran[:3])
    assert not any("src_f32" in ln for ln in lines), "a bfloat16 convolution ran in float32"
    _check_values(results, torch.bfloat16)
