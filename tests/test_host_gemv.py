"""Matrix products with one to three rows on ral:0 (batch-1 decoding: GPT-2's Conv1D
`addmm(bias, x[1, 768], W[768, N])`, nn.Linear's `x @ W.t()`), which the host plugin serves
with ?gemv calls (plugins/host/blas.c, GEMV): per chunk of output columns, or, for a row-major
weight of 2^18 elements or more, per part of whole weight rows added in order. Every element
against PyTorch's CPU result, in both styles (`.to` and `ral_mode`), for the weight layouts
the kernel reads in place (row-major [K, N], a transposed [N, K], a column slice with a longer
row stride) and those it stages (non-unit column stride), a strided x, addmm's beta/alpha and
bias broadcast, beta = 0 ignoring NaN, and float64/float16/bfloat16. Host-only: the kernel is
the host plugin's (ral:1's matmul is unchanged by it and tested in test_opencl_*)."""

from __future__ import annotations

import pytest
import torch
from conftest import digests_across_budgets

import torch_fl
from torch_fl.dispatch import entry

DEV = "ral:0"
TOL = {
    torch.float32: dict(rtol=2e-5, atol=2e-5),
    torch.float64: dict(rtol=1e-12, atol=1e-12),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + 7919 * sum(shape))
    return ((torch.rand(shape, generator=g, dtype=torch.float64) - 0.5) * 0.4).to(dtype)


def _both(style, fn, *args):
    """fn on CPU tensors and on their ral:0 copies in the given style; (device result on CPU, CPU result)."""
    want = fn(*args)
    if style == "to":
        got = fn(*[a.to(DEV) for a in args])
    else:
        with torch_fl.ral_mode(DEV):
            got = fn(*args)
    return got.cpu(), want


def _layouts(K, N, dtype):
    """Weight layouts as functions of one [K + 3, 2N + 1] base: op(B) is [K, N] each time."""
    base = _rand(K + 3, 2 * N + 1, dtype=dtype, seed=1)
    lin = _rand(N, K, dtype=dtype, seed=2)  # nn.Linear's [out, in]
    return {
        "rowmajor": (lambda b: b[:K, :N].contiguous(), base),  # Conv1D's [K, N]
        "row_stride": (lambda b: b[1 : K + 1, 3 : N + 3], base),  # ldb = 2N + 1 > N, offset
        "transposed": (lambda w: w.t(), lin),  # strides (1, K)
        "col_stride": (lambda b: b[:K, : 2 * N : 2], base),  # column stride 2: staged
    }


# (1, 768, 2304), (3, 777, 1030) and (2, 3072, 768) take the row-major weight in parts of rows
# (6, 3 and 8 parts; 777 rows do not divide evenly)
SHAPES = [
    (1, 768, 2304),
    (3, 777, 1030),
    (2, 3072, 768),
    (1, 769, 17),
    (2, 77, 131),
    (3, 5, 1001),
    (4, 33, 64),
    (5, 9, 40),
    (1, 1, 9),
    (1, 3, 1),
]


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["rowmajor", "row_stride", "transposed", "col_stride"])
def test_few_row_products_match_cpu(style, shape, layout):
    """mm and addmm (bias [N], beta 0.5, alpha -2) of M = 1..5 rows; M = 4, 5 are the GEMM beside it."""
    M, K, N = shape
    view, w = _layouts(K, N, torch.float32)[layout]
    x, bias = _rand(M, K, seed=3), _rand(N, seed=4)
    tiers = []
    entry.OBSERVERS.append(lambda op, tier, dev, t0, t1, args: tiers.append((str(op), tier)))
    try:
        got, want = _both(style, lambda x, w, b: view(w).__rmatmul__(x), x, w, bias)
        torch.testing.assert_close(got, want, **TOL[torch.float32])
        got, want = _both(style, lambda x, w, b: torch.addmm(b, x, view(w), beta=0.5, alpha=-2.0), x, w, bias)
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    finally:
        entry.OBSERVERS.pop()
    # the host plugin's kernels ran them, not a CPU fallback
    assert ("aten::mm", "vendor") in tiers and ("aten::addmm", "vendor") in tiers, tiers


@pytest.mark.parametrize("style", ["to", "mode"])
def test_strided_row_and_bias_broadcasts(style):
    """x as a strided row (column stride 3) and as a column of a transposed matrix; biases
    [1, N], 0-d and a full [M, N]; addmm's out-of-place and in-place forms."""
    K, N = 129, 300
    xs, w, b2 = _rand(1, 3 * K), _rand(K, N, seed=5), _rand(2, N, seed=6)

    def fn(xs, w, b2):
        x_strided = xs[:, ::3]  # [1, K], strides (3K, 3)
        x_col = xs[:, :K].reshape(K, 1).t()  # [1, K] from a [K, 1]
        two_rows = torch.stack([xs[0, :K], xs[0, K : 2 * K]], 1).t()  # [2, K], strides (1, 2)
        out = [x_strided @ w, torch.addmm(b2[:1], x_col, w), torch.addmm(b2[0, 0], x_strided, w, alpha=0.25)]
        out.append(torch.addmm(b2, two_rows, w, beta=-1.0))
        acc = b2[:1].clone()
        acc.addmm_(x_strided, w, beta=2.0, alpha=3.0)  # in place: C holds the addend
        return torch.cat(out[:3] + [out[3], acc])

    got, want = _both(style, fn, xs, w, b2)
    torch.testing.assert_close(got, want, **TOL[torch.float32])


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("K, N", [(40, 70), (768, 768)], ids=["column_chunks", "row_parts"])
def test_beta_zero_ignores_nan_and_alpha_zero(style, K, N):
    """beta = 0 ignores a NaN addend (PyTorch's rule), mm into a NaN-filled out= buffer
    overwrites it, and alpha = 0 leaves beta * bias; [768, 768] takes the weight in parts of
    rows, where part 0 writes C."""
    x, w, nan_bias = _rand(1, K), _rand(K, N, seed=8), torch.full((N,), float("nan"))

    def fn(x, w, nb):
        out = torch.full((1, N), float("nan"), device=x.device)
        torch.mm(x, w, out=out)
        return torch.cat([torch.addmm(nb, x, w, beta=0.0), out, torch.addmm(nb.nan_to_num(1.5), x, w, alpha=0.0)])

    got, want = _both(style, fn, x, w, nan_bias)
    assert torch.isfinite(want).all()
    torch.testing.assert_close(got, want, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_other_dtypes(dtype):
    """float64 through dgemv; float16/bfloat16 staged into float32 and through sgemv; each with
    a transposed weight (column chunks) and a row-major one (parts of rows)."""
    K, N = 301, 257
    x, w, b = _rand(1, K, dtype=dtype), _rand(N, K, dtype=dtype, seed=9), _rand(N, dtype=dtype, seed=10)
    want = torch.addmm(b.double(), x.double(), w.double().t()).to(dtype)
    got = torch.addmm(b.to(DEV), x.to(DEV), w.to(DEV).t()).cpu()
    torch.testing.assert_close(got, want, **TOL[dtype])
    # a row-major [1024, 600] weight: two parts of rows (dgemv for float64)
    x2, w2 = _rand(1, 1024, dtype=dtype, seed=11), _rand(1024, 600, dtype=dtype, seed=12)
    want = (x2.double() @ w2.double()).to(dtype)
    torch.testing.assert_close((x2.to(DEV) @ w2.to(DEV)).cpu(), want, **TOL[dtype])


def test_lm_head_and_gpt2_linear():
    """A tied LM head ([1, 768] @ [50257, 768].t(), many column chunks) and nn.Linear/Conv1D-shaped
    products of one token, through the nn modules."""
    lin = torch.nn.Linear(768, 3072)
    head = torch.nn.Linear(768, 50257, bias=False)
    with torch.no_grad():
        head.weight.mul_(0.05)
    x = _rand(1, 1, 768)
    want = [lin(x), head(x)]
    lin_d, head_d = lin.to(DEV), head.to(DEV)
    with torch.no_grad():
        got = [lin_d(x.to(DEV)).cpu(), head_d(x.to(DEV)).cpu()]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w.detach(), **TOL[torch.float32])


def test_weight_in_parts_does_not_depend_on_the_thread_budget():
    """The parts of rows are fixed by the shape: one thread and two give the same bits."""
    code = """
        import hashlib, torch, torch_fl
        g = torch.Generator().manual_seed(0)
        w, x, b = torch.randn(3072, 768, generator=g), torch.randn(2, 3072, generator=g), torch.randn(768, generator=g)
        r = torch.addmm(b.to("ral:0"), x.to("ral:0"), w.to("ral:0")).cpu()
        torch.testing.assert_close(r, torch.addmm(b, x, w), rtol=1e-4, atol=1e-4)
        print(hashlib.sha256(r.numpy().tobytes()).hexdigest())
    """
    digests = digests_across_budgets(code, ("1", "2", "3"))
    assert len(digests) == 1, digests
