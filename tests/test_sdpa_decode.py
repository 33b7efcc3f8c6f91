"""Decode attention on ral:0: scaled_dot_product_attention with query length 1 against 1..600
keys, which the host plugin's fused kernel serves with vector dot products and value sums
instead of two OpenBLAS GEMM calls per head (plugins/host/attention.c, row_scores). Outputs
against PyTorch's CPU result in both styles, causal and not (is_causal with one query is
top-left aligned on CPU: it sees key 0 only; checked here against CPU, not assumed), float and
bool masks, the [B, S, H, E] -> [B, H, S, E] transposed layout of a KV cache, several heads and batches, and float16/bfloat16 widened into float32. Host-only: the path is
the host plugin's kernel (ral:1's fused attention is tested in test_sdpa_fused.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from torch_fl.dispatch import entry

DEV = "ral:0"
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}
TOL[torch.bfloat16] = dict(rtol=1.6e-2, atol=1.6e-2)
FUSED = "aten::_scaled_dot_product_flash_attention_for_cpu"


def _qkv(B, H, S, E, Ev, layout, dtype=torch.float32):
    g = torch.Generator().manual_seed(B * 1000 + H * 100 + S + E)
    if layout == "bshe":  # a transformer's [B, S, H, E] transposed to [B, H, S, E]
        q = torch.randn(B, 1, H, E, generator=g).transpose(1, 2)
        k = torch.randn(B, S, H, E, generator=g).transpose(1, 2)
        v = torch.randn(B, S, H, Ev, generator=g).transpose(1, 2)
    else:
        q, k, v = (torch.randn(B, H, n, e, generator=g) for n, e in ((1, E), (S, E), (S, Ev)))
    return [t.to(dtype) for t in (q, k, v)]


def _on_device(t):
    """t on ral:0 with its strides (a plain .to may compact a strided tensor)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=DEV).copy_(t)


def _check(style, q, k, v, mask=None, **kw):
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    tiers = []
    entry.OBSERVERS.append(lambda op, tier, dev, t0, t1, args: tiers.append((str(op), tier)))
    try:
        if style == "to":
            m = None if mask is None else mask.to(DEV)
            got = F.scaled_dot_product_attention(*map(_on_device, (q, k, v)), attn_mask=m, **kw).cpu()
        else:
            with torch_fl.ral_mode(DEV):
                got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw).cpu()
    finally:
        entry.OBSERVERS.pop()
    assert (FUSED, "vendor") in tiers, tiers  # the host plugin's fused kernel, not the math path
    torch.testing.assert_close(got, want, **TOL[q.dtype])


SHAPES = [(1, 12, 1, 64, 64), (1, 12, 20, 64, 64), (2, 3, 255, 16, 16), (1, 4, 256, 64, 64), (3, 2, 257, 8, 8)]
SHAPES += [(1, 1, 600, 64, 64)]


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", ["bhse", "bshe"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_decode_attention_matches_cpu(style, shape, layout, causal):
    """Query length 1, no mask, causal or not, and a scale of 0.3 for the full case."""
    q, k, v = _qkv(*shape, layout)
    _check(style, q, k, v, is_causal=causal, **({} if causal else {"scale": 0.3}))


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("S", [7, 300])
def test_decode_attention_masks(style, S):
    """A float mask broadcast over heads ([B, 1, 1, S]) and a bool mask ([1, S]) hiding
    every third key (key 0 stays visible: no empty row)."""
    q, k, v = _qkv(2, 3, S, 32, 32, "bhse")
    fmask = torch.randn(2, 1, 1, S, generator=torch.Generator().manual_seed(S))
    bmask = (torch.arange(S) % 3 != 2).reshape(1, S)
    _check(style, q, k, v, fmask)
    _check(style, q, k, v, bmask)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_attention_half(dtype):
    """float16/bfloat16 operands widened into float32, against CPU's float32 result rounded."""
    q, k, v = _qkv(1, 12, 77, 64, 64, "bshe", dtype)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float()).to(dtype)
    got = F.scaled_dot_product_attention(*map(_on_device, (q, k, v))).cpu()
    torch.testing.assert_close(got, want, **TOL[dtype])


def test_decode_attention_propagates_nan_in_values():
    """A NaN in the value row of a masked-out key reaches the output, as in CPU's product of
    probabilities and values (0 * NaN): a kernel that skips zero probabilities would hide it."""
    q, k, v = _qkv(1, 2, 9, 16, 16, "bhse")
    v[0, 1, 4, 3] = float("nan")
    mask = (torch.arange(9) != 4).reshape(1, 9)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = F.scaled_dot_product_attention(*map(_on_device, (q, k, v)), attn_mask=mask.to(DEV)).cpu()
    assert torch.isnan(want[0, 1, 0, 3]) and not torch.isnan(want[0, 0]).any()
    torch.testing.assert_close(got, want, equal_nan=True, **TOL[torch.float32])
