"""The OpenCL GEMM family (mm, bmm, addmm, baddbmm, dot, Linear) vs torch CPU, for every
register-tile variant (forced with TORCH_FL_OPENCL_GEMM in a subprocess) and the automatic
choice: edge tiles, transposed and strided operands, batches, alpha/beta and broadcast
bias. Tolerance rtol 1e-4 / atol 1e-4 * sqrt(K): float32 accumulation order differs
from MKL's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import opencl_device, private_cache_home, run_python  # noqa: E402

DEV = opencl_device()
pytestmark = pytest.mark.skipif(DEV is None, reason="no OpenCL device (plugin not built or no platform)")

SHAPES = [(1, 1, 1), (3, 5, 7), (12, 16, 9), (13, 17, 33), (64, 64, 64), (100, 37, 129), (130, 200, 70), (7, 300, 5)]


def _close(got, want, k):
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4 * max(1.0, k**0.5))


@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_mm_layouts(m, n, k):
    torch.manual_seed(m * 1000 + n + k)
    a, b = torch.randn(m, k), torch.randn(k, n)
    for x, y in ((a, b), (a.t().contiguous().t(), b), (a, b.t().contiguous().t())):
        _close(x.to(DEV) @ y.to(DEV), x @ y, k)
    # A strided view (every other column of a wider matrix) and an offset.
    wide = torch.randn(k, 2 * n + 1)
    bv = wide[:, 1::2]
    _close(a.to(DEV) @ wide.to(DEV)[:, 1::2], a @ bv, k)


@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_addmm_bias_alpha_beta(m, n, k):
    torch.manual_seed(k)
    a, b = torch.randn(m, k), torch.randn(n, k).t()
    for bias in (torch.randn(n), torch.randn(m, 1), torch.randn(m, n)):
        want = torch.addmm(bias, a, b, beta=0.5, alpha=-2.0)
        _close(torch.addmm(bias.to(DEV), a.to(DEV), b.to(DEV), beta=0.5, alpha=-2.0), want, k)
    nan_bias = torch.full((m, n), float("nan"))
    _close(torch.addmm(nan_bias.to(DEV), a.to(DEV), b.to(DEV), beta=0.0), torch.addmm(nan_bias, a, b, beta=0.0), k)


@pytest.mark.parametrize("bt,m,n,k", [(1, 5, 6, 7), (3, 13, 17, 33), (16, 128, 64, 128), (8, 128, 128, 64)], ids=str)
def test_bmm_and_baddbmm(bt, m, n, k):
    torch.manual_seed(bt)
    a, b = torch.randn(bt, m, k), torch.randn(bt, n, k).transpose(1, 2)
    _close(torch.bmm(a.to(DEV), b.to(DEV)), torch.bmm(a, b), k)
    c = torch.randn(bt, m, n)
    _close(
        torch.baddbmm(c.to(DEV), a.to(DEV), b.to(DEV), beta=0.25, alpha=1.5),
        torch.baddbmm(c, a, b, beta=0.25, alpha=1.5),
        k,
    )


def test_dot_and_linear_backward():
    torch.manual_seed(0)
    x, y = torch.randn(1000), torch.randn(1000)
    _close(torch.dot(x.to(DEV), y.to(DEV)), torch.dot(x, y), 1000)
    lin = torch.nn.Linear(70, 33)
    lin_d = torch.nn.Linear(70, 33).to(DEV)
    lin_d.load_state_dict(lin.state_dict())
    inp = torch.randn(45, 70)
    lin(inp).square().sum().backward()
    lin_d(inp.to(DEV)).square().sum().backward()
    _close(lin_d.weight.grad, lin.weight.grad, 45)
    _close(lin_d.bias.grad, lin.bias.grad, 45)


VARIANTS = ["r8x8", "r4x16", "r6x16", "r4x8", "r8x16", "r12x16", "r16x16", "tiled"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_matches_cpu(variant):
    code = f"""
import torch, torch_fl
dev = {DEV!r}
torch.manual_seed(0)
for (bt, m, n, k) in [(1, 1, 9, 4), (2, 13, 17, 33), (1, 100, 37, 129), (3, 24, 48, 16)]:
    a, b, c = torch.randn(bt, m, k), torch.randn(bt, n, k).transpose(1, 2), torch.randn(m, n)
    got = torch.baddbmm(c.to(dev), a.to(dev), b.to(dev), beta=0.5, alpha=2.0).cpu()
    torch.testing.assert_close(got, torch.baddbmm(c, a, b, beta=0.5, alpha=2.0), rtol=1e-4, atol=1e-3)
    got = (a[0].to(dev) @ b[0].to(dev)).cpu()
    torch.testing.assert_close(got, a[0] @ b[0], rtol=1e-4, atol=1e-3)
print("ok")
"""
    r = run_python(code, env={"TORCH_FL_OPENCL_GEMM": variant})
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_tuned_tile_file_is_read_and_a_bad_one_ignored(tmp_path):
    """gemm_tiles.conf beside the binaries picks the tile; malformed lines change nothing."""
    conf = tmp_path / "torch_fl" / "opencl" / "gemm_tiles.conf"
    conf.parent.mkdir(parents=True)
    name = next(d.name for d in torch_fl.devices() if f"ral:{d.index}" == DEV)
    conf.write_text(f"garbage\n{name}\tlarge\tno_such_variant\n{name}\tsmall\tr16x16\n{name}\tlarge\tr4x8\n\n")
    code = f"""
import torch, torch_fl
dev = {DEV!r}
torch.manual_seed(0)
for (bt, m, n, k) in [(4, 33, 40, 17), (1, 300, 260, 31)]:
    a, b = torch.randn(bt, m, k), torch.randn(bt, k, n)
    torch.testing.assert_close(torch.bmm(a.to(dev), b.to(dev)).cpu(), torch.bmm(a, b), rtol=1e-4, atol=1e-3)
print("ok")
"""
    r = run_python(code, env={"XDG_CACHE_HOME": private_cache_home(tmp_path)})
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_gemm_panels_are_kept_per_stream_and_reused():
    """Each GEMM packs its operands into panel buffers; a stream keeps them for its later GEMMs
    (panels.c) instead of creating two buffers per GEMM (PoCL: a host allocation whose pages
    fault on the first pack). Queued GEMMs of changing sizes reuse the kept panels, bigger for
    smaller, with CPU's values; another stream keeps its own."""
    from test_opencl_latency import _SO, counters

    if _SO.ral_opencl_inline(-1) < 0:
        pytest.skip(f"{DEV} has no host path to turn off")
    torch.ral.synchronize(DEV)
    before = _SO.ral_opencl_inline(0)  # every GEMM queued (small ones would run inline)
    try:
        torch.manual_seed(0)
        shapes = [(96, 80, 200), (40, 70, 120), (96, 80, 200), (64, 64, 64), (40, 70, 120)]
        pairs = [(torch.randn(m, k), torch.randn(k, n)) for m, n, k in shapes]
        ins = [(a.to(DEV), b.to(DEV)) for a, b in pairs]
        warm = [x @ y for x, y in ins]  # the stream keeps these GEMMs' panels, the pool their outputs
        del warm
        torch.ral.synchronize(DEV)
        c0 = counters()
        outs = [x @ y for x, y in ins]
        torch.ral.synchronize(DEV)
        assert counters()["buffers"] - c0["buffers"] == 0, "a GEMM created panel buffers"
        for got, (a, b) in zip(outs, pairs):
            _close(got, a @ b, a.shape[1])
        s = torch.ral.Stream(DEV)
        with torch.ral.stream(s):
            x, y = ins[0]
            c1 = counters()
            first = x @ y
            s.synchronize()
            c2 = counters()
            _close(first, pairs[0][0] @ pairs[0][1], 200)
            del first  # its output block serves the next product
            got = x @ y
            s.synchronize()
            # its first GEMM made its own two panels (and maybe an output), the next one none
            assert c2["buffers"] - c1["buffers"] >= 2, "a new stream used another stream's panels"
            assert counters()["buffers"] - c2["buffers"] == 0
        _close(got, pairs[0][0] @ pairs[0][1], 200)
    finally:
        torch.ral.synchronize(DEV)
        _SO.ral_opencl_inline(before)
