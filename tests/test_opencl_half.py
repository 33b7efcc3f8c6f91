"""float16 and bfloat16 as vendor kernels on the OpenCL device (PoCL in CI, which has no
cl_khr_fp16: the kernels store 16 bits through vload_half/vstore_half and ral_half.h and
compute in float). Each family runs in both dtypes and both styles (`.to(dev)` and
`torch_fl.ral_mode`) and must run in the vendor tier and match PyTorch CPU:

- element-wise, casts, reductions: CPU computes in float and rounds each result once, as the
  kernels do; math functions differ by a float ulp, which can move a result one 16-bit ulp:
  torch's default tolerances for the dtype (float16 rtol 1e-3, bfloat16 rtol 1.6e-2, atol
  1e-5; sums and means at rtol 2 ulps, atol 1e-3 * row length).
- indexing, copies, padding, cat: exact.
- GEMM (mm, addmm, bmm, baddbmm, linear, dot), softmax family, layer norm, nll_loss, fused
  attention: the kernels widen to float32 and round the result once (plugins/opencl/half.c),
  as CPU accumulates in float and rounds once; the float32 sums differ in order, so rtol is
  two 16-bit ulps and atol a 16-bit ulp times sqrt(K) for a K-long product.
- an autocast float16 (and bfloat16) GPT-2 training step against CPU float32, whose matmuls
  run in the vendor tier.
"""

from __future__ import annotations

import copy
import math
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import model_zoo  # noqa: E402
from conftest import run_python  # noqa: E402


def _ocl():
    p = next((p for p in torch_fl.plugins() if p.record.name == "opencl"), None)
    return p if p is not None and p.record.status == "LOADED" and p.devices else None


P = _ocl()
pytestmark = pytest.mark.skipif(P is None, reason="no OpenCL device (plugin not built or no platform)")
DEV = f"ral:{P.devices[0]}" if P else "ral:1"
IDX = P.devices[0] if P else 1
A = torch.ops.aten
HALVES = [torch.float16, torch.bfloat16]
ULP = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
EXACT = "exact"
EW = "ew"  # torch's default tolerance for the dtype


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def r(*shape, lo=-2.0, hi=2.0, seed=0):
    return torch.rand(*shape, generator=_gen(seed + sum(shape))) * (hi - lo) + lo


def ints(*shape, hi=5):
    return torch.randint(0, hi, shape, generator=_gen(7))


def gemm_tol(k):
    """rtol two 16-bit ulps, atol a 16-bit ulp times sqrt(k) (the size of a k-long sum of
    products of O(1) values)."""
    return lambda dt: dict(rtol=2 * ULP[dt], atol=ULP[dt] * max(1.0, math.sqrt(k)))


def sum_tol(n):
    return lambda dt: dict(rtol=2 * ULP[dt], atol=1e-3 * n)


# (name, fn, args, tolerance, ops that must run in the vendor tier). Float args are cast to
# the dtype under test; integer ones (indices, targets) stay as they are.
CASES = [
    (
        "elementwise",
        lambda a, b: [
            a + b,
            a - 2 * b,
            a * b,
            a / (b.abs() + 0.5),
            a * 3 + 1,
            -a,
            a.exp(),
            (a.abs() + 0.1).log(),
            (a.abs() + 0.1).sqrt(),
            a.tanh(),
            a.sigmoid(),
            F.gelu(a),
            F.gelu(a, approximate="tanh"),
            F.silu(a),
            F.relu(a),
            a.clamp(-1, 1),
            torch.maximum(a, b),
            a.pow(2),
            torch.addcmul(a, a, b, value=0.5),
            torch.lerp(a, b, 0.3),
            a.masked_fill(b > 0, -1.5),
            (a > b),
            (a == a),
            a.abs(),
        ],
        [r(8, 33), r(8, 33, seed=1)],
        EW,
        ["aten::add.Tensor", "aten::mul.Tensor", "aten::exp", "aten::gelu", "aten::masked_fill.Scalar"],
    ),
    (
        "casts_and_copies",
        lambda a: [a.float(), a.float().to(a.dtype), a.t().contiguous(), a[:, 1::2].clone(), a.to(torch.int64)],
        [r(6, 10, lo=-50, hi=50)],
        EXACT,
        ["aten::clone"],
    ),
    (
        "reductions",
        lambda a: [
            a.sum(),
            a.sum(1),
            a.mean(0),
            a.amax(1),
            a.max(0).values,
            a.argmax(1),
            a.var(1),
            a[:, :4].prod(1),
            a.all(1),  # |a| < 1 in places: a truth test, not a truncation to integer
            F.relu(a).all(1),
            (a * (a.abs() < 0.5)).any(1),
            a.any(),
        ],
        [r(16, 40)],
        sum_tol(40),
        ["aten::sum", "aten::sum.dim_IntList", "aten::amax", "aten::var.correction", "aten::all.dim", "aten::any.dim"],
    ),
    (
        "indexing",
        lambda a, i: [
            a.gather(1, i),
            a.index_select(0, i[:, 0]),
            a.scatter(1, i, -a[:, :3]),
            torch.cat([a, a[:2]], 0),
            a.tril(),
            a.triu(1),
            F.pad(a, (1, 2, 0, 1), value=0.5),
            A.slice_backward(a[:, :4], [4, 9], 1, 1, 8, 2),
            F.embedding(i % 4, a),
        ],
        [r(4, 5), ints(4, 3)],
        EXACT,
        ["aten::gather", "aten::index_select", "aten::cat", "aten::tril", "aten::constant_pad_nd", "aten::embedding"],
    ),
    (
        "gemm",
        lambda a, b, bias, c3, d3: [
            a @ b,
            torch.addmm(bias, a, b),
            torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
            a.t().contiguous().t() @ b,
            F.linear(a, b.t(), bias),
            torch.bmm(c3, d3),
            torch.baddbmm(c3 @ d3, c3, d3, beta=0.25),
            torch.dot(a[0], b[:, 0]),
        ],
        [r(24, 96), r(96, 40), r(40), r(3, 7, 96), r(3, 96, 9)],
        gemm_tol(96),
        ["aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::dot"],
    ),
    (
        "softmax_norm_loss",
        lambda x, w, b, t: [
            torch.softmax(x, -1),
            torch.log_softmax(x, 1),
            A._softmax_backward_data(x, torch.softmax(x, -1), 1, x.dtype),
            A._log_softmax_backward_data(x, torch.log_softmax(x, -1), 1, x.dtype),
            A.native_layer_norm(x, [x.shape[-1]], w, b, 1e-5)[0],
            F.nll_loss(torch.log_softmax(x, 1), t),
        ],
        [r(6, 50), r(50), r(50), ints(6, hi=50)],
        gemm_tol(50),
        ["aten::_softmax", "aten::_log_softmax", "aten::native_layer_norm", "aten::nll_loss_forward"],
    ),
]


def _cast(v, dt):
    if isinstance(v, torch.Tensor) and v.is_floating_point():
        return v.to(dt)
    return v


def _run(fn, args, dt, style):
    """fn on device copies of args (style "device") or on CPU args under ral_mode ("mode"),
    with coverage; returns (results, coverage)."""
    with torch_fl.coverage() as cov:
        if style == "device":
            got = fn(*[a.to(DEV) for a in args])
        else:
            with torch_fl.ral_mode(DEV):
                got = fn(*args)
        got = [g.cpu() for g in got]
    return got, cov


def _compare(got, want, tol, dt, what):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, (what, i, g.dtype, w.dtype)
        if tol == EXACT:
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=f"{what} result {i}")
        elif tol == EW:
            torch.testing.assert_close(g, w, equal_nan=True, msg=f"{what} result {i}")
        else:
            torch.testing.assert_close(g, w, equal_nan=True, msg=f"{what} result {i}", **tol(dt))


@pytest.mark.parametrize("style", ["device", "mode"])
@pytest.mark.parametrize("dt", HALVES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name,fn,args,tol,ops", CASES, ids=[c[0] for c in CASES])
def test_half_family_runs_vendor_and_matches_cpu(name, fn, args, tol, ops, dt, style):
    args = [_cast(a, dt) for a in args]
    want = fn(*[a.clone() for a in args])
    got, cov = _run(fn, args, dt, style)
    _compare(got, want, tol, dt, f"{name} {dt} {style}")
    vendor = set(cov.ops_in_tier("vendor", IDX))
    assert set(ops) <= vendor, sorted(set(ops) - vendor)
    assert not [f for f in cov.fallbacks(IDX) if f[1] == "cpu"], cov.fallbacks(IDX)


@pytest.mark.parametrize("dt", HALVES, ids=["float16", "bfloat16"])
def test_half_attention_runs_fused_and_matches_cpu(dt):
    """scaled_dot_product_attention (causal, and with a float mask) in the fused vendor kernel;
    CPU's flash kernel rounds its probabilities to the 16-bit type before P @ V, the fused
    kernel keeps them in float, so two 16-bit ulps plus an atol of a few ulps."""
    q, k, v = (r(2, 4, 16, 32, seed=s).to(dt) for s in range(3))
    mask = r(1, 1, 16, 16, seed=5).to(dt)
    want = [F.scaled_dot_product_attention(q, k, v, is_causal=True), F.scaled_dot_product_attention(q, k, v, mask)]
    with torch_fl.coverage() as cov:
        qd, kd, vd = q.to(DEV), k.to(DEV), v.to(DEV)
        got = [
            F.scaled_dot_product_attention(qd, kd, vd, is_causal=True).cpu(),
            F.scaled_dot_product_attention(qd, kd, vd, mask.to(DEV)).cpu(),
        ]
    for g, w in zip(got, want):
        assert g.dtype == dt
        torch.testing.assert_close(g, w, rtol=2 * ULP[dt], atol=4 * ULP[dt])
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in cov.ops_in_tier("vendor", IDX)


@pytest.mark.parametrize("dt", HALVES, ids=["float16", "bfloat16"])
def test_half_layer_norm_and_softmax_backward_through_autograd(dt):
    """Gradients of layer norm + softmax in 16 bits on the device, against CPU's."""
    x, w, b = r(5, 64).to(dt), r(64).to(dt), r(64).to(dt)

    def f(x, w, b):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        y = torch.softmax(F.layer_norm(x, (64,), w, b), -1)
        (y * y).sum().backward()
        return [y.detach(), x.grad, w.grad, b.grad]

    want = f(x, w, b)
    with torch_fl.coverage() as cov:
        got = [t.cpu() for t in f(x.to(DEV), w.to(DEV), b.to(DEV))]
    for g, wt in zip(got, want):
        torch.testing.assert_close(g, wt, rtol=4 * ULP[dt], atol=4 * ULP[dt] * 8)
    vendor = set(cov.ops_in_tier("vendor", IDX))
    assert {"aten::native_layer_norm_backward", "aten::_softmax_backward_data"} <= vendor, sorted(vendor)


@pytest.mark.parametrize("dt", HALVES, ids=["float16", "bfloat16"])
def test_half_random_ops_draw_in_range(dt):
    """Dropout masks, uniform_ and normal_ in 16 bits on the device: the right dtype, range and
    moments (the draws themselves are the Philox stream, not CPU's)."""
    with torch_fl.coverage() as cov:
        u = torch.empty(20000, dtype=dt, device=DEV).uniform_(-1, 2).cpu().float()
        n = torch.empty(20000, dtype=dt, device=DEV).normal_(0.5, 2.0).cpu().float()
        d = F.dropout(torch.ones(20000, dtype=dt, device=DEV), 0.25).cpu().float()
    assert -1 <= u.min() and u.max() <= 2 and abs(u.mean() - 0.5) < 0.05
    assert abs(n.mean() - 0.5) < 0.1 and abs(n.std() - 2.0) < 0.1
    kept = torch.tensor(1 / 0.75, dtype=dt).item()  # dropout's scale, rounded to the dtype as on CPU
    assert set(d.unique().tolist()) <= {0.0, kept} and abs((d == 0).float().mean() - 0.25) < 0.02
    assert {"aten::uniform_", "aten::normal_"} <= set(cov.ops_in_tier("vendor", IDX))


def test_mixed_16_bit_matmul_is_refused_not_misread():
    """float16 @ bfloat16 and float16 @ float32 are dtype errors on CPU; on the device too, with
    CPU's message (dispatch/dtype_checks.py; the 16-bit path widens every operand, so a call
    that reached it would be computed, not refused)."""
    a = r(4, 4).half()
    for b in (r(4, 4).bfloat16(), r(4, 4)):
        with pytest.raises(RuntimeError) as cpu:
            a @ b
        with pytest.raises(RuntimeError) as dev:
            a.to(DEV) @ b.to(DEV)
        assert str(dev.value) == str(cpu.value)
    assert (a.to(DEV) @ a.to(DEV)).cpu().dtype == torch.float16  # the process keeps working


@pytest.mark.parametrize("low", HALVES, ids=["float16", "bfloat16"])
def test_autocast_gpt2_training_step_matches_cpu_float32(low):
    """One autocast training step of a small GPT-2 on the OpenCL device against CPU in float32
    without autocast: loss within 2e-2 relative, gradients within autocast tolerances (1e-1
    of the largest gradient of each tensor), every matmul in the vendor tier, no warning."""
    torch.manual_seed(0)
    model = model_zoo.build("gpt2")
    batch = model_zoo.inputs("gpt2")
    dmodel = copy.deepcopy(model).to(DEV)
    dbatch = model_zoo.to(batch, DEV)
    ref = model(**batch).loss
    ref.backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch_fl.coverage() as cov:
            with torch.autocast("ral", dtype=low):
                out = dmodel(**dbatch)
            assert out.logits.dtype == low
            out.loss.backward()
    torch.testing.assert_close(out.loss.cpu(), ref.detach(), rtol=2e-2, atol=2e-2)
    grads = dict(model.named_parameters())
    for name, p in dmodel.named_parameters():
        want = grads[name].grad
        scale = want.abs().max().item() + 1e-3
        torch.testing.assert_close(p.grad.cpu(), want, rtol=0.1, atol=0.1 * scale, msg=name)
    vendor = set(cov.ops_in_tier("vendor", IDX))
    assert {"aten::addmm", "aten::mm"} <= vendor, sorted(vendor)
    matmuls = [f for f in cov.fallbacks(IDX) if f[0] in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")]
    assert matmuls == [], matmuls
    assert not [f for f in cov.fallbacks(IDX) if f[1] == "cpu"], cov.fallbacks(IDX)


def test_fills_at_odd_element_offsets_run_and_match_cpu():
    """`x[1:].fill_(v)` in float16 crashed the process (SIGSEGV in PoCL's code for ew_h16c's
    constant store loop at a 2-byte-aligned address; certify's offset variant found it):
    16-bit fills are a 2-byte fill pattern now. A fresh interpreter, so a crash fails the test
    instead of the worker."""
    code = f"""
        import torch, torch_fl
        for dt in (torch.float16, torch.bfloat16):
            for off in (1, 3, 8):
                for shape in ((16,), (2, 2, 2, 2), (5, 7)):
                    n = 1
                    for s in shape:
                        n *= s
                    want = torch.zeros(n + off, dtype=dt)
                    got = want.to({DEV!r})
                    for t in (want, got):
                        t[off:].view(shape).fill_(2.5)
                        t[off:].view(shape)[1:].zero_()
                        t[:off].fill_(-1.0 / 3)
                    assert torch.equal(got.cpu(), want), (dt, off, shape, got.cpu(), want)
        print("ok")
    """
    proc = run_python(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])
