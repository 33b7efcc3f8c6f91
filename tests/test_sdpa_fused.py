"""scaled_dot_product_attention on ral: the fused (overrideable) path where a vendor declares a
fused attention kernel (OpenCL: ocl_sdpa_forward, host: host_sdpa_forward), the math path
elsewhere. Values and
gradients of query, key, value and a float mask against PyTorch CPU, on every ral device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import launch_count

import torch_fl
from torch_fl.tiers.attention import fused_choice

VAL = dict(rtol=1e-4, atol=1e-5)
GRAD = dict(rtol=1e-4, atol=5e-5)


def _devices():
    out = []
    for p in torch_fl.plugins():
        if p.devices and p.record.name in ("host", "opencl"):
            out.append(pytest.param(f"ral:{p.devices[0]}", id=p.record.name))
    return out


DEVICES = _devices()


def _qkv(B, H, L, S, E, strided, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if strided:  # the [B, L, H, E] -> [B, H, L, E] transposes a transformer hands SDPA
        q = torch.randn(B, L, H, E, generator=g, dtype=dtype).transpose(1, 2)
        k = torch.randn(B, S, H, E, generator=g, dtype=dtype).transpose(1, 2)
        v = torch.randn(B, S, H, E, generator=g, dtype=dtype).transpose(1, 2)
    else:
        q = torch.randn(B, H, L, E, generator=g, dtype=dtype)
        k = torch.randn(B, H, S, E, generator=g, dtype=dtype)
        v = torch.randn(B, H, S, E, generator=g, dtype=dtype)
    return q, k, v


def _run(dev, q, k, v, mask, **kw):
    """Output and gradients (q, k, v, and the mask's when it is a float leaf) on dev."""
    leaves = [t.detach().to(dev) for t in (q, k, v)]
    if dev != "cpu":  # keep the layout: .to() of a strided CPU tensor may compact it
        leaves = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=dev).copy_(t) for t in (q, k, v)]
    for t in leaves:
        t.requires_grad_(True)
    m = None
    if mask is not None:
        m = mask.detach().to(dev)
        if m.is_floating_point():
            m.requires_grad_(True)
    out = F.scaled_dot_product_attention(*leaves, attn_mask=m, **kw)
    gout = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    out.backward(gout.to(dev))
    grads = [t.grad for t in leaves] + ([m.grad] if m is not None and m.requires_grad else [])
    return out.detach().cpu(), [g.cpu() for g in grads]


def _check(dev, q, k, v, mask=None, **kw):
    ref_out, ref_grads = _run("cpu", q, k, v, mask, **kw)
    out, grads = _run(dev, q, k, v, mask, **kw)
    torch.testing.assert_close(out, ref_out, **VAL)
    assert len(grads) == len(ref_grads)
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        torch.testing.assert_close(g, r, **GRAD, msg=f"gradient {i}")


SHAPES = [(2, 3, 5, 7, 8), (1, 1, 1, 1, 4), (3, 2, 17, 9, 65), (1, 2, 33, 33, 64)]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("strided", [False, True], ids=["contig", "strided"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sdpa_matches_cpu(dev, shape, strided, causal):
    _check(dev, *_qkv(*shape, strided), is_causal=causal)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_long_sequences_and_column_strides(dev, causal):
    """Several query and key blocks of the kernels (L=70, S=600 > one 256-key block), columns
    that are not unit-stride, and a float mask; the fused kernel serves it (one launch)."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 24, 70, generator=g).transpose(-1, -2)  # [1, 2, 70, 24], column stride 70
    k = torch.randn(1, 2, 600, 24, generator=g)
    v = torch.randn(1, 2, 24, 600, generator=g).transpose(-1, -2)  # [1, 2, 600, 24], column stride 600
    mask = None if causal else torch.randn(70, 600, generator=g)
    _check(dev, q, k, v, mask, is_causal=causal)
    leaves = [torch.empty_strided(t.shape, t.stride(), device=dev).copy_(t) for t in (q, k, v)]
    assert fused_choice(*leaves, None if mask is None else mask.to(dev), 0.0, causal, False)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("L,S", [(3, 8), (8, 3)])
def test_causal_when_query_and_key_lengths_differ(dev, L, S):
    _check(dev, *_qkv(2, 2, L, S, 16, False), is_causal=True)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("mshape", [(2, 3, 5, 7), (5, 7), (1, 3, 1, 7), (2, 1, 5, 1)], ids=str)
def test_float_mask_values_and_gradient(dev, mshape):
    q, k, v = _qkv(2, 3, 5, 7, 8, True)
    mask = torch.randn(mshape, generator=torch.Generator().manual_seed(3))
    _check(dev, q, k, v, mask)


@pytest.mark.parametrize("dev", DEVICES)
def test_strided_mask_and_explicit_scale(dev):
    q, k, v = _qkv(2, 3, 5, 7, 8, False)
    mask = torch.randn(2, 3, 7, 5).transpose(-2, -1)  # non-contiguous
    _check(dev, q, k, v, mask, scale=0.3)


def _causal_bool(L, S):
    return torch.ones(L, S, dtype=torch.bool).tril()  # top-left aligned, as is_causal


def _near_misses(L, S):
    extra = _causal_bool(L, S)
    extra[L // 2, L // 2 + 1] = True  # one key past the diagonal visible
    hidden = _causal_bool(L, S)
    hidden[L - 1, 0] = False  # one key below the diagonal hidden
    per_batch = _causal_bool(L, S).expand(2, 1, L, S).clone()
    per_batch[1, 0, 3, 2] = False  # causal in batch 0 only
    return {"extra": extra, "hidden": hidden, "per_batch": per_batch}


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize(
    "case", ["causal", "causal_4d", "causal_L_lt_S", "causal_L_gt_S", "extra", "hidden", "per_batch"]
)
def test_bool_mask_that_is_causal(dev, case):
    """A bool mask equal to the causal one (compiled transformers pass causal attention this
    way) is served as is_causal by the host kernel; masks that differ in one element, or in
    one batch, must not be. Values and gradients against CPU; L = 40 spans two query blocks."""
    L, S = {"causal_L_lt_S": (8, 12), "causal_L_gt_S": (12, 8)}.get(case, (40, 40))
    q, k, v = _qkv(2, 3, L, S, 16, True)
    causal = _causal_bool(L, S)
    masks = {"causal_4d": causal.expand(2, 1, L, S).contiguous(), **_near_misses(L, S)}
    _check(dev, q, k, v, masks.get(case, causal))


@pytest.mark.parametrize("dev", DEVICES)
def test_bool_mask_with_a_fully_masked_row(dev):
    q, k, v = _qkv(2, 3, 5, 7, 8, False)
    mask = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(4)) > 0.4
    mask[0, 0, 2] = False  # a query that sees no key: zeros, as the math path's _safe_softmax
    mask[:, :, :, 0] = mask[:, :, :, 0] | (torch.arange(5) != 2)
    _check(dev, q, k, v, mask)
    out, _ = _run(dev, q, k, v, mask)
    assert torch.all(out[0, :, 2] == 0)


@pytest.mark.parametrize("dev", DEVICES)
def test_calls_the_fused_kernel_cannot_take_use_the_math_path(dev):
    q, k, v = _qkv(1, 2, 4, 6, 260, False)  # head size over the fused limit
    assert not fused_choice(q.to(dev), k.to(dev), v.to(dev), None, 0.0, False, False)
    _check(dev, q, k, v)
    q, k, v = _qkv(1, 2, 4, 6, 8, False, dtype=torch.float64)
    _check(dev, q, k, v, is_causal=True)
    # grouped-query attention (2 query heads per key head)
    q, _, _ = _qkv(1, 4, 4, 6, 8, False)
    _, k, v = _qkv(1, 2, 4, 6, 8, False, seed=1)
    _check(dev, q, k, v, enable_gqa=True)


@pytest.mark.parametrize("dev", DEVICES)
def test_dropout_is_never_fused(dev):
    q, k, v = (t.to(dev) for t in _qkv(1, 2, 4, 6, 8, False))
    assert not fused_choice(q, k, v, None, 0.5, False, False)
    torch.manual_seed(0)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert out.shape == (1, 2, 4, 8) and torch.isfinite(out.cpu()).all()


@pytest.mark.parametrize("dev", DEVICES)
def test_attention_is_one_launch(dev):
    q, k, v = (t.to(dev) for t in _qkv(2, 4, 32, 32, 64, True))
    mask = torch.randn(32, 32).to(dev)
    bool_mask = (torch.rand(2, 1, 32, 32) > 0.5).to(dev)
    idx = torch.device(dev).index
    ref = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), is_causal=True)
    for ctx in (torch.no_grad, torch.inference_mode):  # inference_mode skips the autograd keys
        with ctx():
            for kw in (dict(is_causal=True), dict(attn_mask=mask), dict(attn_mask=bool_mask), {}):
                F.scaled_dot_product_attention(q, k, v, **kw)
                before = launch_count(idx)
                out = F.scaled_dot_product_attention(q, k, v, **kw)
                # One kernel, writing the [B, L, H, E] layout PyTorch's meta kernel promises
                # for these transposed inputs (compiled graphs view the output by it; the
                # model's transpose(1, 2).contiguous() after SDPA is then free), and one small
                # copy of the log-sum-exp: the CPU op's meta lays it out [B, L, H], the
                # overrideable op's meta [B, H, L].
                assert launch_count(idx) - before == 2, (ctx.__name__, kw)
                assert out.stride() == (32 * 4 * 64, 64, 4 * 64, 1), (ctx.__name__, kw)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(out.cpu(), ref, **VAL)


@pytest.mark.parametrize("dev", DEVICES)
def test_kernel_refuses_dropout_with_a_clear_error(dev):
    q, k, v = (t.to(dev) for t in _qkv(1, 2, 4, 6, 8, False))
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    with pytest.raises(torch_fl.UnsupportedError, match="dropout"):
        op(q, k, v, 0.5, False)
    out, _ = op(q, k, v, 0.0, False)  # the process keeps working
    ref = F.scaled_dot_product_attention(*_qkv(1, 2, 4, 6, 8, False))
    torch.testing.assert_close(out.cpu(), ref, **VAL)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_kernel_op_with_a_broadcast_key_and_half_types(dev, dtype):
    """The kernel op itself on a key broadcast along its rows (row stride 0, made on the
    device) in every float type: output, log-sum-exp and gradients equal CPU's same op (the
    host kernel copies such rows into scratch it sizes for them)."""
    fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    g = torch.Generator().manual_seed(3)
    q, k1, v = (torch.randn(*s, generator=g).to(dtype) for s in ((2, 2, 37, 8), (2, 2, 1, 8), (2, 2, 300, 8)))
    k = k1.expand(2, 2, 300, 8)
    kd = k1.to(dev).expand(2, 2, 300, 8)
    assert kd.stride()[2] == 0
    out, lse = fwd(q, k, v, 0.0, False)
    got_out, got_lse = fwd(q.to(dev), kd, v.to(dev), 0.0, False)
    tol = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float16: dict(rtol=0, atol=2e-3)}.get(
        dtype, dict(rtol=0, atol=2e-2)
    )
    torch.testing.assert_close(got_out.cpu().float(), out.float(), **tol)
    torch.testing.assert_close(got_lse.cpu(), lse, rtol=1e-4, atol=1e-4)  # float32; scores summed in another order
    gout = torch.randn(out.shape, generator=g).to(dtype)
    want = bwd(gout, q, k, v, out, lse, 0.0, False)
    got = bwd(gout.to(dev), q.to(dev), kd, v.to(dev), got_out, got_lse, 0.0, False)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == dtype
        torch.testing.assert_close(a.cpu().float(), b.float(), **tol, msg=f"gradient {i}")


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_with_masks_and_a_hidden_row(dev, dtype):
    """float16/bfloat16 through SDPA with a float mask (its gradient too), a bool mask with a
    query that sees no key (zero output row) and a causal bool mask: output and gradients no
    further from CPU's float32 result of the same rounded inputs than twice CPU's own error in
    that dtype, plus a quarter of the type's tolerance (2e-3 float16, 2e-2 bfloat16)."""
    floor = (2e-3 if dtype == torch.float16 else 2e-2) / 4
    q, k, v = _qkv(2, 3, 40, 40, 16, True, dtype=dtype)
    hidden = torch.rand(2, 1, 40, 40, generator=torch.Generator().manual_seed(4)) > 0.4
    hidden[0, 0, 2] = False
    hidden[:, :, :, 0] = hidden[:, :, :, 0] | (torch.arange(40) != 2)
    float_mask = torch.randn(40, 40, generator=torch.Generator().manual_seed(5)).to(dtype)
    for mask in (float_mask, hidden, _causal_bool(40, 40)):
        wide = mask.float() if mask.is_floating_point() else mask
        want_out, want_grads = _run("cpu", q.float(), k.float(), v.float(), wide)
        cpu_out, cpu_grads = _run("cpu", q, k, v, mask)
        out, grads = _run(dev, q, k, v, mask)
        assert out.dtype == dtype and len(grads) == len(want_grads)
        for i, (g, c, w) in enumerate(zip([out, *grads], [cpu_out, *cpu_grads], [want_out, *want_grads])):
            err, cpu_err = (g.float() - w).abs().max().item(), (c.float() - w).abs().max().item()
            assert err <= 2 * cpu_err + floor, f"result {i}: {err:.2e} from float32 (CPU {dtype}: {cpu_err:.2e})"
        if mask is hidden:
            assert torch.all(out[0, :, 2] == 0)


@pytest.mark.parametrize("dev", DEVICES)
def test_fused_forward_inner_ops_seen_by_modes_and_profiler(dev):
    # Without a dispatch mode or profiler the fused forward's inner kernel op skips PyTorch's
    # dispatcher (a decoded token makes one such call per layer). A dispatch mode sees the
    # fused op (its handler runs with the mode popped, so never the inner op), the profiler
    # the inner kernel op, and every way gives CPU's values.
    from torch.utils._python_dispatch import TorchDispatchMode

    q, k, v = _qkv(1, 2, 1, 7, 8, strided=True)
    mask = torch.randn(1, 1, 1, 7)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)

    def call():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q.to(dev), k.to(dev), v.to(dev), attn_mask=mask.to(dev), scale=0.3)

    torch.testing.assert_close(call().cpu(), expected, **VAL)

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen() as seen:
        got = call()
    torch.testing.assert_close(got.cpu(), expected, **VAL)
    assert "aten._scaled_dot_product_fused_attention_overrideable.default" in seen.ops, seen.ops
    with torch.profiler.profile() as prof:
        got = call()
    torch.testing.assert_close(got.cpu(), expected, **VAL)
    names = {e.name for e in prof.events()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names
