"""The host plugin's float32 convolutions on oneDNN (plugins/host/conv_dnnl.c), and its fallback.

A child process runs convolutions (forward, input and weight gradient, bias gradient) on ral:0
in both styles with `ONEDNN_VERBOSE=1`: oneDNN's own trace must show the plugin's library
(oneDNN v2, not PyTorch's bundled v3) running convolution forward, backward_data and
backward_weights primitives, and every result must match PyTorch's CPU convolution (rtol/atol
1e-4). The same child with `TORCH_FL_HOST_DNNL=0` must run no oneDNN convolution (conv.c's
im2col) and match CPU too. Skipped, saying so, where libdnnl.so.2 does not load (a build or
machine without Debian's libdnnl-dev): the plugin then always runs im2col, which
tests/test_conv_kernels.py covers.
"""

from __future__ import annotations

import ctypes

import pytest
import torch
from conftest import plugin_device, run_python

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
cases = {cases!r}
out = {{}}
for style in ("to", "mode"):
    for name, xs, ws, kw, cl in cases:
        g = torch.Generator().manual_seed(len(name))
        x, w = torch.randn(xs, generator=g), torch.randn(ws, generator=g)
        b = torch.randn(ws[0], generator=g)
        if cl:
            x = x.to(memory_format=torch.channels_last)
        conv = F.conv1d if len(xs) == 3 else F.conv2d
        if style == "to":
            xd, wd, bd = (t.to("ral:0").requires_grad_() for t in (x, w, b))
            y = conv(xd, wd, bd, **kw)
            gy = torch.randn(y.shape, generator=g).to("ral:0")
            y.backward(gy)
        else:
            xd, wd, bd = (t.clone().requires_grad_() for t in (x, w, b))
            with torch_fl.ral_mode("ral:0"):
                y = conv(xd, wd, bd, **kw)
                y.backward(torch.randn(y.shape, generator=g))
        out[style + "/" + name] = [t.detach().cpu() for t in (y, xd.grad, wd.grad, bd.grad)]
torch.ral.synchronize("ral:0")
torch.save(out, {path!r})
print("CHILD-DONE")
"""


def _dnnl_loads() -> bool:
    try:
        ctypes.CDLL("libdnnl.so.2")
    except OSError:
        return False
    return True


def _expected(name, xs, ws, kw, cl):
    g = torch.Generator().manual_seed(len(name))
    x, w = torch.randn(xs, generator=g), torch.randn(ws, generator=g)
    b = torch.randn(ws[0], generator=g)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    x, w, b = (t.requires_grad_() for t in (x, w, b))
    conv = torch.nn.functional.conv1d if len(xs) == 3 else torch.nn.functional.conv2d
    y = conv(x, w, b, **kw)
    y.backward(torch.randn(y.shape, generator=g))
    return [y.detach(), x.grad, w.grad, b.grad]


def _run_child(tmp_path, env):
    path = str(tmp_path / "conv.pt")
    out = run_python(_CHILD.format(cases=CASES, path=path), env={"ONEDNN_VERBOSE": "1", **env})
    assert out.returncode == 0 and "CHILD-DONE" in out.stdout, out.stderr[-3000:]
    return out.stdout, torch.load(path)


def _check_values(results):
    for name, xs, ws, kw, cl in CASES:
        want = _expected(name, xs, ws, kw, cl)
        for style in ("to", "mode"):
            got = results[style + "/" + name]
            for label, a, e in zip(("output", "grad_input", "grad_weight", "grad_bias"), got, want, strict=True):
                torch.testing.assert_close(a, e, rtol=F32[0], atol=F32[1], msg=f"{style} {name} {label}")


def _dnnl_conv_lines(stdout: str) -> list[str]:
    """oneDNN 2.x's trace lines of executed convolutions (PyTorch's bundled 3.x writes
    `onednn_verbose,v1,primitive,exec,...`, so its lines never match)."""
    return [ln for ln in stdout.splitlines() if ln.startswith("onednn_verbose,exec,cpu,convolution,")]


@pytest.mark.skipif(not _dnnl_loads(), reason="libdnnl.so.2 does not load here (no libdnnl-dev): im2col only")
def test_float32_convolutions_run_on_onednn_and_match_cpu(tmp_path):
    """Forward, backward_data and backward_weights primitives of the plugin's oneDNN ran."""
    plugin_device("host")
    stdout, results = _run_child(tmp_path, {})
    assert "oneDNN v2" in stdout, "the plugin's oneDNN (Debian's 2.x) did not initialise"
    lines = _dnnl_conv_lines(stdout)
    for prop in ("forward_training", "backward_data", "backward_weights"):
        assert any(prop in ln for ln in lines), f"no oneDNN convolution {prop} ran"
    _check_values(results)


@pytest.mark.skipif(not _dnnl_loads(), reason="libdnnl.so.2 does not load here: nothing to switch off")
def test_torch_fl_host_dnnl_0_runs_im2col_and_matches_cpu(tmp_path):
    """TORCH_FL_HOST_DNNL=0: no oneDNN convolution runs; conv.c's own kernel gives CPU's values."""
    plugin_device("host")
    stdout, results = _run_child(tmp_path, {"TORCH_FL_HOST_DNNL": "0"})
    assert _dnnl_conv_lines(stdout) == []
    _check_values(results)
