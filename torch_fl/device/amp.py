"""Autocast for ral: kernels on the AutocastPrivateUse1 dispatch key that cast by CUDA's policy.

PyTorch's own autocast kernels exist for CPU, CUDA and a few in-tree devices; an out-of-tree
device registers its own on AutocastPrivateUse1 (torch_npu does it in C++). Here they are
Python kernels registered with torch.library: one per op in the policy, and a fallthrough for
every other op. `torch.autocast("ral", dtype=...)` then works like `torch.autocast("cuda")`.

CPU autocast inside `ral_mode` uses CPU's (smaller) policy: the mode runs each op under
`mirror_cpu_autocast()`, which turns ral autocast on with CPU's dtype and CPU's lists.
"""

from __future__ import annotations

import contextlib
import threading

import torch

from torch_fl.core.errors import UnsupportedError
from torch_fl.core.runtime import device_records
from torch_fl.device.compat import run_untraced

_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_any_autocast = torch._C._is_any_autocast_enabled

# CUDA autocast's lists (aten/src/ATen/autocast_mode.cpp), by op name; every non-out overload.
CUDA_LOWER = (
    "_convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d convolution "
    "prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul "
    "linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell "
    "_scaled_dot_product_flash_attention scaled_dot_product_attention"
).split()
CUDA_FP32 = (
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow softplus layer_norm "
    "native_layer_norm group_norm frobenius_norm nuclear_norm cosine_similarity poisson_nll_loss "
    "cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss "
    "mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss "
    "binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp upsample_nearest1d upsample_nearest2d "
    "upsample_nearest3d upsample_linear1d upsample_bilinear2d upsample_trilinear3d upsample_bicubic2d "
    "cross_entropy_loss"
).split()
CUDA_FP32_SET_DTYPE = "prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm sum".split()
CUDA_PROMOTE = "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put scatter_add tensordot".split()

# CPU autocast's lists, used for CPU autocast inside ral_mode.
CPU_LOWER = (
    "conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm addbmm linear _convolution matmul conv_tbc "
    "conv_transpose1d conv_transpose2d conv_transpose3d prelu scaled_dot_product_attention"
).split()
CPU_FP32 = (
    "avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft cdist trace "
    "max_pool3d adaptive_avg_pool3d mse_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss "
    "poisson_nll_loss smooth_l1_loss cross_entropy_loss l1_loss huber_loss margin_ranking_loss soft_margin_loss "
    "triplet_margin_loss multi_margin_loss ctc_loss kl_div multilabel_margin_loss binary_cross_entropy_with_logits"
).split()
CPU_PROMOTE = "stack cat index_copy".split()

LOWER, FP32, SET_DTYPE, PROMOTE = "lower", "fp32", "set_dtype", "promote"
CUDA_POLICY = {
    **{n: PROMOTE for n in CUDA_PROMOTE},
    **{n: SET_DTYPE for n in CUDA_FP32_SET_DTYPE},
    **{n: FP32 for n in CUDA_FP32},
    **{n: LOWER for n in CUDA_LOWER},
}
CPU_POLICY = {**{n: PROMOTE for n in CPU_PROMOTE}, **{n: FP32 for n in CPU_FP32}, **{n: LOWER for n in CPU_LOWER}}

_tls = threading.local()
_lib = None


def supported_dtypes(index: int) -> list[torch.dtype]:
    """Autocast dtypes of ral device `index`: bfloat16 everywhere (16-bit storage, computed by
    whichever tier serves it), float16 where the device's kernels compute it (`fp16`: both
    built-in plugins, the OpenCL one without cl_khr_fp16 too)."""
    rec = device_records()[index]
    return ([torch.float16] if rec.fp16 else []) + [torch.bfloat16]


def _eligible(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "ral" and t.is_floating_point() and t.dtype != torch.float64


def _map(v, fn):
    if isinstance(v, torch.Tensor):
        return fn(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_map(x, fn) for x in v)
    return v


def _tensors(args, kwargs):
    for v in (*args, *kwargs.values()):
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (x for x in v if isinstance(x, torch.Tensor))


def _check_dtype(dtype, args, kwargs) -> None:
    for t in _tensors(args, kwargs):
        if t.device.type == "ral":
            if dtype not in supported_dtypes(t.device.index):
                raise UnsupportedError(
                    f"RAL_ERROR_UNSUPPORTED: autocast to {dtype} on {t.device}: the device has no native "
                    f"{dtype}; autocast dtypes there are {supported_dtypes(t.device.index)}"
                )
            return


def _cast_to(dtype):
    return lambda t: t.to(dtype) if _eligible(t) and t.dtype != dtype else t


def _kernel(func, name):
    sch_args = func._schema.arguments
    dtype_pos = next((i for i, a in enumerate(sch_args) if a.name == "dtype"), None)
    dtype_kw_only = dtype_pos is not None and sch_args[dtype_pos].kwarg_only

    def autocast_kernel(*args, **kwargs):
        policy = CPU_POLICY if getattr(_tls, "cpu_policy", False) else CUDA_POLICY
        kind = policy.get(name)
        if kind is LOWER:
            low = torch.get_autocast_dtype("ral")
            _check_dtype(low, args, kwargs)
            args, kwargs = _map(args, _cast_to(low)), _map(kwargs, _cast_to(low))
        elif kind is FP32:
            args, kwargs = _map(args, _cast_to(torch.float32)), _map(kwargs, _cast_to(torch.float32))
        elif kind is SET_DTYPE:
            if args and _eligible(args[0]) and kwargs.get("dtype") is None:
                if dtype_pos is not None and not dtype_kw_only and dtype_pos < len(args):
                    if args[dtype_pos] is None:
                        args = (*args[:dtype_pos], torch.float32, *args[dtype_pos + 1 :])
                elif dtype_pos is not None:
                    kwargs = dict(kwargs, dtype=torch.float32)
        elif kind is PROMOTE:
            floats = [t.dtype for t in _tensors(args, kwargs) if _eligible(t)]
            if floats:
                wide = floats[0]
                for d in floats[1:]:
                    wide = torch.promote_types(wide, d)
                args, kwargs = _map(args, _cast_to(wide)), _map(kwargs, _cast_to(wide))
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return func(*args, **kwargs)

    autocast_kernel.__name__ = f"autocast_{name}"
    return autocast_kernel


def register() -> None:
    """Register the autocast kernels and the fallthrough for every other op (idempotent)."""
    global _lib
    if _lib is not None:
        return
    fallback = torch.library.Library("_", "IMPL")  # noqa: TOR901 (a global fallthrough)
    fallback.fallback(torch.library.fallthrough_kernel, _KEY)
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    done = set()
    for name in {**CUDA_POLICY, **CPU_POLICY}:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        for ov in packet.overloads():
            if "out" in ov:
                continue
            func = getattr(packet, ov)
            qual = func._schema.name + ("." + ov if ov != "default" else "")
            if qual in done:
                continue
            done.add(qual)
            kernel = _kernel(func, name)
            lib.impl(qual, kernel, _KEY)
    run_untraced(kernel)  # C++ enters them; every kernel shares this one code object
    _lib = (fallback, lib)


@contextlib.contextmanager
def mirror_cpu_autocast():
    """Autocast ral ops by CPU's dtype and policy while CPU autocast is on (ral_mode's use)."""
    prev_on, prev_dtype = torch.is_autocast_enabled("ral"), torch.get_autocast_dtype("ral")
    prev_policy = getattr(_tls, "cpu_policy", False)
    torch.set_autocast_enabled("ral", True)
    torch.set_autocast_dtype("ral", torch.get_autocast_dtype("cpu"))
    _tls.cpu_policy = True
    try:
        yield
    finally:
        _tls.cpu_policy = prev_policy
        torch.set_autocast_dtype("ral", prev_dtype)
        torch.set_autocast_enabled("ral", prev_on)


def cpu_autocast_needs_mirror() -> bool:
    """Whether CPU autocast is on and ral autocast is not (ral_mode mirrors it then)."""
    # one argument-free C call answers the common case (no autocast at all): ral_mode asks per op
    return _any_autocast() and torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("ral")
