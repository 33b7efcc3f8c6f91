"""Fused attention for the ral device: SDPA's "overrideable" backend, written as aten ops.

PyTorch lets a PrivateUse1 backend take `scaled_dot_product_attention` whole: when
`_fused_sdp_choice` answers OVERRIDEABLE (dispatch/special.py decides when), SDPA calls
`_scaled_dot_product_fused_attention_overrideable`, and autograd calls its `_backward`. CPU
has no kernel for either; dispatch/special.py serves both with the functions here, whose
aten ops are routed one by one.

The forward issues one `_scaled_dot_product_flash_attention_for_cpu` (output and
log-sum-exp), which the router sends to a vendor kernel where the manifest has one (OpenCL:
`ocl_sdpa_forward`, one launch), else to a decomposition or PyTorch's CPU flash kernel. The
backward is one `_scaled_dot_product_flash_attention_for_cpu_backward` where the device has a
vendor kernel for it (host: `host_sdpa_backward`) and no mask gradient is wanted; otherwise it
recomputes the probabilities from the log-sum-exp with matmuls (no [L, S] matrix is kept
between forward and backward) and also returns the mask's gradient.
"""

from __future__ import annotations

import math

import torch

from torch_fl.core.registry import REGISTRY
from torch_fl.device.dtypes import CODE_OF_TORCH

aten = torch.ops.aten
FUSED_FORWARD = "aten::_scaled_dot_product_flash_attention_for_cpu"
FUSED_BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"


def _float_mask(mask, dtype):
    """An additive mask: a bool mask (True = keep) becomes 0 / -inf, as SDPA's own conversion."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = aten.zeros_like.default(mask, dtype=dtype)
    return aten.masked_fill.Scalar(zero, aten.logical_not.default(mask), float("-inf"))


def call_aten(op, *args, **kwargs):
    """op(*args, **kwargs) through PyTorch's dispatcher."""
    return op(*args, **kwargs)


def sdpa_forward(
    query,
    key,
    value,
    attn_bias=None,
    dropout_p=0.0,
    is_causal=False,
    return_debug_mask=False,
    *,
    scale=None,
    call=call_aten,
):
    """(output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, seed, offset, debug_mask).

    `call(op, *args, **kwargs)` runs the inner aten ops: the dispatcher by default; the
    router directly when the caller is below every mode and key that would see them."""
    if dropout_p != 0.0 or return_debug_mask:
        # _fused_sdp_choice never picks this backend with dropout; refuse rather than ignore it.
        raise NotImplementedError("torch_fl's fused attention has no dropout or debug mask")
    # A bool mask goes through as is (the OpenCL kernel and PyTorch's CPU kernel take both).
    # keyword arguments only where set: a call without them takes the router's positional cache
    optional = {k: v for k, v in (("attn_mask", attn_bias), ("scale", scale)) if v is not None}
    out, lse = call(
        aten._scaled_dot_product_flash_attention_for_cpu.default, query, key, value, 0.0, bool(is_causal), **optional
    )
    B, H, L = query.shape[0], query.shape[1], query.shape[2]
    if tuple(lse.shape) != (B, H, L):
        lse = call(aten.reshape.default, lse, [B, H, L])
    seed = call(aten.empty.memory_format, [], dtype=torch.long, device=query.device)
    # No cumulative sequence lengths or debug mask: undefined, as PyTorch's meta kernel for this
    # op says (DTensor and compiled graphs plan the outputs by it).
    return out, lse, None, None, L, key.shape[-2], seed, seed, None


def _bmm(a, b, ta=False, tb=False):
    """[B, H, m, k] @ [B, H, k, n] (operands optionally transposed) as one bmm on 3-D views."""
    B, H = a.shape[0], a.shape[1]
    a3 = aten.reshape.default(a, [B * H, a.shape[2], a.shape[3]])
    b3 = aten.reshape.default(b, [B * H, b.shape[2], b.shape[3]])
    if ta:
        a3 = aten.transpose.int(a3, 1, 2)
    if tb:
        b3 = aten.transpose.int(b3, 1, 2)
    c = aten.bmm.default(a3, b3)
    return aten.view.default(c, [B, H, c.shape[1], c.shape[2]])


def _sum_to(t, shape):
    """Sum a [B, H, L, S] gradient down to a broadcast mask's shape."""
    shape = tuple(shape)
    lead = t.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and t.shape[lead + i] != 1]
    if dims:
        t = aten.sum.dim_IntList(t, dims, True)
    return aten.reshape.default(t, list(shape))


def sdpa_backward(
    grad_out,
    query,
    key,
    value,
    attn_bias,
    grad_input_mask,
    out,
    logsumexp,
    cum_seq_q,
    cum_seq_k,
    max_q,
    max_k,
    dropout_p,
    is_causal,
    philox_seed,
    philox_offset,
    *,
    scale=None,
):
    """(grad_query, grad_key, grad_value, grad_attn_bias) of sdpa_forward."""
    if dropout_p != 0.0:
        raise NotImplementedError("torch_fl's fused attention has no dropout")
    want_q, want_k, want_v, want_b = (bool(x) for x in grad_input_mask)
    if not (want_b and attn_bias is not None) and _fused_backward_fits(query, key, attn_bias):
        gq, gk, gv = aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
            grad_out, query, key, value, out, logsumexp, 0.0, bool(is_causal), attn_mask=attn_bias, scale=scale
        )
        return (gq if want_q else None), (gk if want_k else None), (gv if want_v else None), None
    wants = (want_q, want_k, want_v, want_b)
    if query.dtype not in (torch.float16, torch.bfloat16):
        return _math_backward(grad_out, query, key, value, attn_bias, out, logsumexp, is_causal, scale, wants)
    # As PyTorch's math SDPA does for reduced types on CPU: compute in float32 (logsumexp
    # already is), round the gradients once. In float16 the scores' rounding before exp made
    # the gradients 5-10x further from float32 than CPU's.
    up = [_float32(t) for t in (grad_out, query, key, value, attn_bias, out)]
    grads = _math_backward(*up, logsumexp, is_causal, scale, wants)
    return tuple(None if g is None else aten._to_copy.default(g, dtype=query.dtype) for g in grads)


def _float32(t):
    """t in float32 when it is a floating tensor (a bool mask and None pass)."""
    if t is None or not t.is_floating_point() or t.dtype == torch.float32:
        return t
    return aten._to_copy.default(t, dtype=torch.float32)


def _math_backward(grad_out, query, key, value, attn_bias, out, logsumexp, is_causal, scale, wants):
    """SDPA's gradients through routed aten ops (bmm, exp, ...), in the inputs' dtype."""
    want_q, want_k, want_v, want_b = wants
    sc = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    s = aten.mul.Scalar(_bmm(query, key, tb=True), sc)
    if attn_bias is not None:
        s = aten.add.Tensor(s, _float_mask(attn_bias, s.dtype))
    # p = softmax rows; a row with no visible key has lse 0 and every score -inf, so p = 0 there.
    p = aten.exp.default(aten.sub.Tensor(s, aten.unsqueeze.default(logsumexp, -1)))
    if is_causal:
        # Zero the hidden keys after the exp: tril keeps j <= i, PyTorch's causal alignment,
        # and replaces whatever exp gave above the diagonal (one launch, not a mask + fill).
        p = aten.tril.default(p)
    grad_v = _bmm(p, grad_out, ta=True) if want_v else None
    grad_q = grad_k = grad_b = None
    if want_q or want_k or want_b:
        dp = _bmm(grad_out, value, tb=True)
        delta = aten.sum.dim_IntList(aten.mul.Tensor(grad_out, out), [-1], True)
        ds = aten.mul.Tensor(p, aten.sub.Tensor(dp, delta))
        if want_b and attn_bias is not None:
            grad_b = _sum_to(ds, attn_bias.shape)
        if want_q or want_k:
            ds = aten.mul.Scalar(ds, sc)  # once, for both products
        if want_q:
            grad_q = _bmm(ds, key)
        if want_k:
            grad_k = _bmm(ds, query, ta=True)
    return grad_q, grad_k, grad_v, grad_b


def _fused_backward_fits(query, key, mask) -> bool:
    """Whether the device has a vendor kernel for the fused backward (host: one task per batch
    and head, five GEMMs on an [L, S] tile) in query's dtype and the call fits it: non-empty
    sequences, a bool mask or one of query's dtype."""
    if query.shape[-2] == 0 or key.shape[-2] == 0:
        return False
    if mask is not None and mask.dtype not in (torch.bool, query.dtype):
        return False
    return has_fused_kernel(query, FUSED_BACKWARD)


def has_fused_kernel(query, op: str = FUSED_FORWARD) -> bool:
    """Whether query's device has a vendor kernel for `op` (the fused forward unless told) in
    query's dtype; on other devices the math path's kernels beat a decomposition or a CPU round trip."""
    dev = getattr(query, "_dev", None)
    if dev is None and query.device.type == "ral":  # a fake tensor while torch.compile traces
        dev = query.device.index
    if dev is None:
        return False
    key = (dev, op, query.dtype)
    hit = _HAS_FUSED.get(key)
    if hit is not None and hit[0] is REGISTRY.plugins:  # a reload makes a new plugin list
        return hit[1]
    code = CODE_OF_TORCH.get(query.dtype)
    has = any(code in e.dtype_codes and e.min_rank <= 4 <= e.max_rank for e in REGISTRY.entries(dev, op))
    _HAS_FUSED[key] = (REGISTRY.plugins, has)
    return has


# (device, op, dtype) -> (REGISTRY.plugins it was read from, has_fused_kernel's answer):
# asked on every SDPA call, twice (the backend choice, then the call).
_HAS_FUSED: dict = {}


# Head sizes a fused kernel must handle (OpenCL: OCL_SDPA_MAXE, private arrays); larger heads
# take the math path.
MAX_HEAD = 256


# torch.nn.attention.sdpa_kernel's switch for the overrideable backend (every torch that has
# the backend has it; without it the backend is always allowed).
_overrideable_enabled = getattr(torch._C, "_get_overrideable_sdp_enabled", lambda: True)


def fused_choice(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa) -> bool:
    """Whether this SDPA call fits the overrideable backend above (else SDPA's math path)."""
    if not _overrideable_enabled():
        return False  # `with sdpa_kernel(SDPBackend.MATH)` (or without OVERRIDEABLE) rules it out
    if dropout_p != 0.0 or (is_causal and attn_mask is not None):
        return False  # the math path applies dropout, and raises for a mask with is_causal
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4 or query.shape[-1] > MAX_HEAD:
        return False
    if not (query.dtype == key.dtype == value.dtype) or not has_fused_kernel(query):
        return False
    if key.shape[:2] != query.shape[:2] or value.shape[:2] != query.shape[:2]:
        return False  # grouped-query / broadcast heads: the math path repeats them
    if key.shape[-1] != query.shape[-1] or value.shape[-1] != query.shape[-1] or value.shape[-2] != key.shape[-2]:
        return False
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
            return False
        try:
            torch.broadcast_shapes(tuple(attn_mask.shape), (*query.shape[:-1], key.shape[-2]))
        except RuntimeError:
            return False
        if attn_mask.dim() > 4:
            return False
    return True
