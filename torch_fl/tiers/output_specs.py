"""Output geometry the vendor tier sets itself, per op: for ops whose meta kernel is
missing or broken, where a meta kernel types or sizes results unlike CPU's, and where it is
slow on a path that plans anew often (cat, whose KV-cache calls take a new length every
decoded token).

Everything else takes its output shapes and dtypes from PyTorch's meta kernel. These specs
live with the vendor tier (no kernel is registered into torch's aten namespace, so other
programs see PyTorch unchanged).
"""

from __future__ import annotations

import math

import torch
from torch._prims_common import suggest_memory_format

from torch_fl.tensor.ral_tensor import RalTensor


def to_meta(v):
    """A meta tensor (or structure of them) standing for ral tensors in a shape/dtype check."""
    if type(v) is RalTensor:
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(to_meta(x) for x in v)
    return v


def _meta(shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


def _rows(op, t, what):
    """(B, H) of a [B, H] state or gradient; a RuntimeError naming the op otherwise."""
    if not isinstance(t, torch.Tensor) or t.dim() != 2:
        got = f"{t.dim()}-d" if isinstance(t, torch.Tensor) else type(t).__name__
        raise RuntimeError(f"{op}: expected {what} of shape [batch, hidden], got {got}")
    return tuple(t.shape)


def _lstm_cell(full):
    """(hy, cy, workspace) as CUDA allocates them: like cx, cx, input_gates (no meta kernel
    copes with absent biases)."""
    b, h = _rows("_thnn_fused_lstm_cell", full[2], "cx")
    return _meta((b, h), full[2].dtype), _meta((b, h), full[2].dtype), _meta((b, 4 * h), full[0].dtype)


def _lstm_cell_backward(full):
    """(grad_gates, grad_cx, grad_bias?) as CUDA allocates them: like workspace, like cx, and
    [4H] when has_bias (the meta kernel's bad-shape errors carry no message)."""
    b, h = _rows("_thnn_fused_lstm_cell_backward_impl", full[2], "cx")
    ws = full[4].dtype
    return _meta((b, 4 * h), ws), _meta((b, h), full[2].dtype), _meta((4 * h,), ws) if full[5] else None


def _gru_cell(full):
    """(hy, workspace): like hx, and [B, 5H] of hx's dtype (torch has no meta kernel)."""
    b, h = _rows("_thnn_fused_gru_cell", full[2], "hx")
    return _meta((b, h), full[2].dtype), _meta((b, 5 * h), full[2].dtype)


def _gru_cell_backward(full):
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias?, grad_hidden_bias?);
    the bias gradients are undefined without biases, as CUDA returns them."""
    b, h = _rows("_thnn_fused_gru_cell_backward", full[0], "grad_hy")
    gates = full[1].dtype
    bias = _meta((3 * h,), gates) if full[2] else None
    return _meta((b, 3 * h), gates), _meta((b, 3 * h), gates), _meta((b, h), full[0].dtype), bias, bias


def _cat(full):
    """cat's result as the meta kernel gives it, computed directly in the common case: tensors
    of one dtype and rank whose sizes agree off `dim`. Decoding concatenates a KV cache of a
    new length every token, so each token plans a new cat; PyTorch's Python meta kernel was
    about half of that (~180 us). Any other call (type promotion, legacy empty inputs,
    mismatched sizes, whose errors are the meta kernel's) asks the meta kernel."""
    tensors, dim = full[0], full[1]
    first = tensors[0] if tensors else None
    if type(first) is RalTensor and first.dim() > 0 and -first.dim() <= dim < first.dim():
        rank, dtype, shape = first.dim(), first.dtype, list(first.shape)
        d = dim % rank
        total = 0
        for t in tensors:
            if type(t) is not RalTensor or t.dtype != dtype or t.dim() != rank:
                break
            size = t.shape
            if any(size[k] != shape[k] for k in range(rank) if k != d):
                break
            total += size[d]
        else:
            shape[d] = total
            return _meta(shape, dtype)
    return torch.ops.aten.cat.default(to_meta(list(tensors)), dim)


# op name -> full arguments -> output meta tensors (None: an undefined output)
OUTPUT_SPECS = {
    "aten::cat": _cat,
    "aten::_thnn_fused_lstm_cell": _lstm_cell,
    "aten::_thnn_fused_lstm_cell_backward_impl": _lstm_cell_backward,
    "aten::_thnn_fused_gru_cell": _gru_cell,
    "aten::_thnn_fused_gru_cell_backward": _gru_cell_backward,
}


def _bn_stat_spec(spec, full):
    """save_mean/save_invstd as CPU types them: the input's dtype unless a float32 weight,
    bias or running statistic makes the call mixed (the meta kernel always says float32)."""
    x, params = full[0], [t for t in full[1:5] if t is not None]
    if x.dtype not in (torch.float16, torch.bfloat16) or any(t.dtype == torch.float32 for t in params):
        return spec
    shape, strides, _, numel = spec[0], spec[1], spec[2], math.prod(spec[0])
    return (shape, strides, x.dtype, numel * x.dtype.itemsize)


def adjust(name, out_specs, full):
    """Correct (shape, strides, dtype, nbytes) specs taken from a meta kernel in place where
    CPU's results differ from it."""
    if name == "aten::native_batch_norm":
        if not full[5]:
            # eval mode: CPU (and CUDA) return empty save_mean/save_invstd; the meta kernel
            # gives them C elements. Results must look like CPU's.
            for k in (1, 2):
                out_specs[k] = ((0,), (1,), out_specs[k][2], 0)
        out_specs[1:] = [_bn_stat_spec(sp, full) for sp in out_specs[1:]]


# Outputs CPU allocates in its input's suggested memory format (ATen's batch_norm_cpu and
# batch_norm_backward_cpu, max_unpool2d's and channel_shuffle's CPU kernels:
# empty_like(input, input.suggest_memory_format()) or the like): channels_last for a
# channels_last input, row-major for any other, a permuted one included. The meta kernels and
# decompositions do not follow this (a permuted input's strides kept, or row-major always), so
# the vendor and decomp tiers ask this table. op -> (position of that input, output indices)
SUGGESTED_FORMAT_OUTPUTS = {
    "aten::native_batch_norm": (0, (0,)),
    "aten::native_batch_norm_backward": (1, (0,)),
    "aten::max_unpool2d": (0, (0,)),
    "aten::channel_shuffle": (0, (0,)),
}


def suggested_format(name, full):
    """(memory format, output indices) where CPU lays op `name`'s outputs out in its input's
    suggested memory format and that is not row-major for this call's input; else None."""
    rule = SUGGESTED_FORMAT_OUTPUTS.get(name)
    if rule is None or not isinstance(full[rule[0]], torch.Tensor):
        return None
    fmt = suggest_memory_format(full[rule[0]])
    return None if fmt is torch.contiguous_format else (fmt, rule[1])


def in_format(res, fmt, outputs):
    """res (one tensor or a tuple) with each listed output in memory format fmt: a copy only
    where it is laid out otherwise (strides differing in size-1 dims only count as equal)."""
    single = isinstance(res, torch.Tensor)
    outs = [res] if single else list(res)
    for k in outputs:
        o = outs[k]
        if o is not None and not o.is_contiguous(memory_format=fmt):
            outs[k] = o.contiguous(memory_format=fmt)
    return outs[0] if single else tuple(outs)
