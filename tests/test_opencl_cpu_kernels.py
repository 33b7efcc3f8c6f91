"""The CPU-shaped OpenCL kernels (a chunk of elements or rows per work-item, 16-lane vectors;
chosen when the OpenCL device is a CPU, as PoCL here) against PyTorch CPU: every vectorized
element-wise op, strided and broadcast element-wise ops, copies and casts, sums and means,
layer norm, softmax and log_softmax (values and gradients) and the vector attention forward.
Sizes straddle the 16-lane vectors, the chunk boundaries (4096 elements) and the tails.
Tolerances: element-wise 2e-6 relative (OpenCL's builtins may differ from glibc's by a few
ulp), row kernels and attention 1e-5 / 1e-4 (summation order), sums within 2x of CPU's own
error against float64. On a GPU OpenCL device these exercise the per-element kernels."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import opencl_device, run_python  # noqa: E402

DEV = opencl_device()
pytestmark = pytest.mark.skipif(DEV is None, reason="no OpenCL device (plugin not built or no platform)")

SIZES = [1, 15, 16, 17, 4096 * 3 + 5, 70001]
EW = dict(rtol=2e-6, atol=1e-6)


def _x(n, seed=0, lo=-3.0, hi=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, generator=g) * (hi - lo) + lo


UNARY = {
    "neg": torch.neg,
    "exp": torch.exp,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "erf": torch.erf,
    "silu": F.silu,
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "reciprocal": torch.reciprocal,
    "sqrt_abs": lambda x: torch.sqrt(x.abs()),
    "rsqrt_abs": lambda x: torch.rsqrt(x.abs() + 0.1),
    "log_abs": lambda x: torch.log(x.abs() + 0.1),
    "muls": lambda x: x * 0.5,
    "adds": lambda x: x + 1.25,
    "rsub": lambda x: 2.0 - x,
    "divs": lambda x: x / 3.0,
    "pow2": lambda x: x**2,
    "pow3": lambda x: torch.pow(x, 3.0),
    "pow_half": lambda x: torch.pow(x.abs(), 0.5),
    "pow_frac": lambda x: torch.pow(x.abs(), 1.7),
    "clamp": lambda x: torch.clamp(x, -1.0, 0.5),
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_cpu(name, n):
    fn = UNARY[name]
    x = _x(n, seed=n)
    torch.testing.assert_close(fn(x.to(DEV)).cpu(), fn(x), **EW)


BINARY = {
    "add": lambda a, b, c: a + b,
    "add_alpha": lambda a, b, c: torch.add(a, b, alpha=-0.75),
    "sub": lambda a, b, c: a - b,
    "mul": lambda a, b, c: a * b,
    "div": lambda a, b, c: a / (b.abs() + 0.5),
    "addcmul": lambda a, b, c: torch.addcmul(a, b, c, value=0.3),
    "addcdiv": lambda a, b, c: torch.addcdiv(a, b, c.abs() + 0.5, value=-0.3),
    "tanh_backward": lambda a, b, c: torch.ops.aten.tanh_backward(a, b),
    "sigmoid_backward": lambda a, b, c: torch.ops.aten.sigmoid_backward(a, b),
    "gelu_backward": lambda a, b, c: torch.ops.aten.gelu_backward(a, b),
    "gelu_backward_tanh": lambda a, b, c: torch.ops.aten.gelu_backward(a, b, approximate="tanh"),
    "threshold_backward": lambda a, b, c: torch.ops.aten.threshold_backward(a, b, 0.0),
    "maximum": lambda a, b, c: torch.maximum(a, b),
    "lerp": lambda a, b, c: torch.lerp(a, b, 0.3),
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_cpu(name, n):
    fn = BINARY[name]
    a, b, c = _x(n, 1), _x(n, 2), _x(n, 3)
    got = fn(a.to(DEV), b.to(DEV), c.to(DEV)).cpu()
    torch.testing.assert_close(got, fn(a, b, c), **EW)


def test_scalar_tensor_operands_broadcast():
    """A 0-d operand (a wrapped scalar, float32 or float64) is read once, on either side."""
    x = _x(70001, 4)
    for s in (torch.tensor(0.37), torch.tensor(-2.5, dtype=torch.float64)):
        for fn in (lambda x, s: x * s, lambda x, s: s - x, lambda x, s: torch.where(x > 0, x, s.float())):
            torch.testing.assert_close(fn(x.to(DEV), s.to(DEV)).cpu(), fn(x, s), **EW)


def test_nan_and_inf_pass_through_vector_ops():
    x = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1.0] * 6)
    for fn in (torch.relu, torch.neg, lambda t: t * 2.0, lambda t: t + 1.0, torch.tanh, torch.sigmoid):
        torch.testing.assert_close(fn(x.to(DEV)).cpu(), fn(x), equal_nan=True, **EW)
    g = torch.ones_like(x)
    got = torch.ops.aten.threshold_backward(g.to(DEV), x.to(DEV), 0.0).cpu()
    torch.testing.assert_close(got, torch.ops.aten.threshold_backward(g, x, 0.0), equal_nan=True)


@pytest.mark.parametrize("shape", [(37, 1000), (3, 5, 4099), (2, 3, 4, 5, 6)])
def test_strided_and_broadcast_elementwise(shape):
    """ew_anyc: transposed operands, row and column broadcasts, runs across chunk ends."""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(shape, generator=g)
    at = a.transpose(0, -1).contiguous().transpose(0, -1)  # same values, reversed strides
    row = torch.randn(shape[-1], generator=g)
    col = torch.randn(*shape[:-1], 1, generator=g)
    got = (at.to(DEV) * row.to(DEV) + col.to(DEV)).cpu()
    torch.testing.assert_close(got, at * row + col, **EW)
    ops = (  # a[..., ::2] is not dense: a contiguous output over a strided input
        lambda a, r, c: a - c,
        lambda a, r, c: a / (r.abs() + 0.5),
        lambda a, r, c: torch.exp(a[..., ::2]),
        lambda a, r, c: a[..., ::2] * 2.5,
        lambda a, r, c: a[..., ::2] + 1.5,
        lambda a, r, c: torch.tanh(a[..., ::2]),
    )
    for fn in ops:
        torch.testing.assert_close(fn(at.to(DEV), row.to(DEV), col.to(DEV)).cpu(), fn(at, row, col), **EW)
    cmp = (at.to(DEV) > col.to(DEV)).cpu()
    assert torch.equal(cmp, at > col)
    ints = torch.randint(-50, 50, shape, generator=g)
    assert torch.equal((ints.to(DEV).transpose(0, 1) * 3 - 7).cpu(), ints.transpose(0, 1) * 3 - 7)


@pytest.mark.parametrize("shape", [(4, 128, 4, 64), (3, 7, 4099), (1, 1), (5, 3, 2, 7, 11)])
def test_strided_copies_and_casts(shape):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(shape, generator=g)
    xt = x.transpose(0, 1)
    assert torch.equal(xt.to(DEV).contiguous().cpu(), xt.contiguous())
    i = torch.randint(-1000, 1000, shape, generator=g).transpose(0, 1)
    assert torch.equal(i.to(DEV).float().cpu(), i.float())
    assert torch.equal(xt.to(DEV).to(torch.int32).cpu(), xt.to(torch.int32))
    assert torch.equal(i.to(DEV).to(torch.int16).contiguous().cpu(), i.to(torch.int16).contiguous())


@pytest.mark.parametrize(
    "shape,dims",
    [((512, 1024), (0,)), ((4, 128, 1024), (0, 1)), ((4, 128, 100), (2,)), ((7, 33, 37), (1,)), ((3, 40, 17), (0, 2))],
    ids=str,
)
def test_sum_and_mean_over_dims(shape, dims):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(shape, generator=g) * 100 + 3
    want = x.double()
    for fn in (torch.sum, torch.mean):
        got = fn(x.to(DEV), dim=dims).cpu().double()
        ref = fn(want, dim=dims)
        cpu_err = (fn(x, dim=dims).double() - ref).abs().max().item()
        err = (got - ref).abs().max().item()
        assert err <= 2 * cpu_err + 1e-6 * ref.abs().max().item(), (fn.__name__, err, cpu_err)
    strided = x.transpose(0, -1)
    torch.testing.assert_close(strided.to(DEV).sum(0).cpu(), strided.sum(0), rtol=1e-5, atol=1e-3)


def test_column_sums_of_a_badly_conditioned_input_stay_accurate():
    """Bias-gradient shape (sum over rows of [rows, N]) with large cancelling values."""
    g = torch.Generator().manual_seed(8)
    base = torch.randn(4096, 40, generator=g) * 1e4
    x = torch.cat([base, -base, torch.randn(3, 40, generator=g)])
    ref = x.double().sum(0)
    err = (x.to(DEV).sum(0).cpu().double() - ref).abs().max().item()
    cpu_err = (x.sum(0).double() - ref).abs().max().item()
    assert err <= 2 * cpu_err + 1e-6, (err, cpu_err)


@pytest.mark.parametrize("shape", [(512, 256), (3, 5, 37), (7, 16), (2, 4115), (1, 1)], ids=str)
def test_layer_norm_forward_and_backward(shape):
    g = torch.Generator().manual_seed(9)
    x, w, b = (
        torch.randn(shape, generator=g) * 3 + 1,
        torch.randn(shape[-1], generator=g),
        torch.randn(shape[-1], generator=g),
    )
    go = torch.randn(shape, generator=g)
    outs = []
    for dev in ("cpu", DEV):
        leaves = [t.detach().to(dev).clone().requires_grad_(True) for t in (x, w, b)]
        y = F.layer_norm(leaves[0], (shape[-1],), leaves[1], leaves[2])
        y.backward(go.to(dev))
        outs.append([y.detach().cpu()] + [t.grad.cpu() for t in leaves])
    for got, want in zip(outs[1], outs[0]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,dim", [((512, 2048), -1), ((3, 5, 37), -1), ((7, 16), 1), ((3, 4, 5), 1)], ids=str)
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_forward_and_backward(fn, shape, dim):
    g = torch.Generator().manual_seed(10)
    x, go = torch.randn(shape, generator=g) * 4, torch.randn(shape, generator=g)
    res = []
    for dev in ("cpu", DEV):
        xd = x.detach().to(dev).clone().requires_grad_(True)
        y = fn(xd, dim)
        y.backward(go.to(dev))
        res.append((y.detach().cpu(), xd.grad.cpu()))
    torch.testing.assert_close(res[1][0], res[0][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res[1][1], res[0][1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 4, 128, 128), (3, 7, 5), (2, 5, 9), (1, 1)], ids=str)
def test_tril_and_triu(shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(12))
    for k in (-10, -2, 0, 1, 3, 10):
        assert torch.equal(torch.tril(x.to(DEV), k).cpu(), torch.tril(x, k)), k
        assert torch.equal(torch.triu(x.to(DEV), k).cpu(), torch.triu(x, k)), k


def test_safe_softmax_of_a_fully_masked_row_is_zero():
    x = torch.tensor([[float("-inf")] * 20, [0.0] * 20])
    got = torch.ops.aten._safe_softmax(x.to(DEV), -1).cpu()
    assert torch.equal(got[0], torch.zeros(20)) and torch.allclose(got[1], torch.full((20,), 0.05))


def _attn(dev, q, k, v, **kw):
    kw = {n: a.to(dev) if isinstance(a, torch.Tensor) else a for n, a in kw.items()}
    return F.scaled_dot_product_attention(q.to(dev), k.to(dev), v.to(dev), **kw).cpu()


@pytest.mark.parametrize("E", [16, 64, 128, 144])
@pytest.mark.parametrize("L,S", [(128, 128), (37, 37), (5, 70), (70, 5)], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_vector_path(E, L, S, causal):
    """E a multiple of 16 up to 128 takes sdpa_fwd_c (144 the per-row kernel), strided inputs."""
    g = torch.Generator().manual_seed(E + L)
    q = torch.randn(2, L, 3, E, generator=g).transpose(1, 2)
    k = torch.randn(2, S, 3, E, generator=g).transpose(1, 2)
    v = torch.randn(2, S, 3, E, generator=g).transpose(1, 2)
    torch.testing.assert_close(
        _attn(DEV, q, k, v, is_causal=causal), _attn("cpu", q, k, v, is_causal=causal), rtol=1e-4, atol=1e-5
    )


def test_attention_vector_path_masks():
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 3, 40, 32, generator=g) for _ in range(3))
    fm = torch.randn(2, 1, 40, 40, generator=g)
    torch.testing.assert_close(
        _attn(DEV, q, k, v, attn_mask=fm), _attn("cpu", q, k, v, attn_mask=fm), rtol=1e-4, atol=1e-5
    )
    bm = torch.rand(2, 3, 40, 40, generator=g) > 0.5
    bm[:, :, :, 0] = True
    bm[1, 2, 7] = False  # a query that sees no key: zeros
    got = _attn(DEV, q, k, v, attn_mask=bm)
    torch.testing.assert_close(got, _attn("cpu", q, k, v, attn_mask=bm), rtol=1e-4, atol=1e-5)
    assert torch.all(got[1, 2, 7] == 0)


def test_profile_file_lists_each_kernel(tmp_path):
    """TORCH_FL_OPENCL_PROFILE=<file>: one line per kernel at each synchronization."""
    out = tmp_path / "prof.tsv"
    code = f"""
    import torch, torch_fl
    x = torch.ones(1000).to({DEV!r})
    y = torch.tanh(x) * 2
    torch.ral.synchronize(torch.device({DEV!r}))
    """
    res = run_python(code, env={"TORCH_FL_OPENCL_PROFILE": str(out)})
    assert res.returncode == 0, res.stderr
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert len(rows) >= 2 and all(len(r) == 6 for r in rows), rows
    assert all(float(r[4]) >= 0 for r in rows)
    assert any(r[0].startswith("ew_") for r in rows), rows
    assert os.path.getsize(out) > 0
