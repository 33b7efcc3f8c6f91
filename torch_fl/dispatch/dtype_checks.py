"""Dtype checks CPU kernels make and PyTorch's meta functions skip or word otherwise.

The router plans a call from its meta result, so a dtype a CPU kernel refuses (integer lerp,
complex mse_loss, a float32 @ float64 product) ran on ral, or failed inside a plugin with the
plugin's own words. Each check here repeats CPU's, with its exception type and message; the
names ATen prints come from device/dtypes.py. argument_checks.py merges these into CHECKS.
"""

from __future__ import annotations

import torch

from torch_fl.device.dtypes import SCALAR_TYPE_NAME, TYPE_META_NAME


def _t(v):
    return v if isinstance(v, torch.Tensor) else None


def _not_implemented(kernel: str, dtype: torch.dtype) -> NotImplementedError:
    # AT_DISPATCH's refusal of a dtype the kernel was not built for
    return NotImplementedError(f"\"{kernel}\" not implemented for '{SCALAR_TYPE_NAME[dtype]}'")


def _integral(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def _mm_check(full) -> None:
    # ATen Blas.cpp mm meta: the two operands' dtypes, printed as TypeMeta names
    a, b = _t(full[0]), _t(full[1])
    if a is not None and b is not None and a.dtype != b.dtype:
        raise RuntimeError(
            "expected m1 and m2 to have the same dtype, but got: "
            f"{TYPE_META_NAME[a.dtype]} != {TYPE_META_NAME[b.dtype]}"
        )
    if a is not None and a.dtype is torch.bool:
        raise _not_implemented("addmm_impl_cpu_", a.dtype)


def _addmm_check(full) -> None:
    # ATen Blas.cpp addmm meta: self against mat2 first, then mat1 against mat2
    self, m1, m2 = _t(full[0]), _t(full[1]), _t(full[2])
    if self is None or m1 is None or m2 is None:
        return
    for name, x in (("self", self), ("mat1", m1)):
        if x.dtype != m2.dtype:
            raise RuntimeError(
                f"{name} and mat2 must have the same dtype, but got "
                f"{SCALAR_TYPE_NAME[x.dtype]} and {SCALAR_TYPE_NAME[m2.dtype]}"
            )
    if m2.dtype is torch.bool:
        raise _not_implemented("addmm_impl_cpu_", m2.dtype)


def _bmm_check(full, kernel: str = "bmm") -> None:
    # ATen's CPU bmm (and baddbmm's batches) dispatches on the first operand's dtype (no
    # bool), then reads the second as that type ("expected scalar type")
    a, b = _t(full[0]), _t(full[1])
    if a is None or b is None:
        return
    if a.dtype is torch.bool:
        raise _not_implemented(kernel, a.dtype)
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAME[a.dtype]} but found {SCALAR_TYPE_NAME[b.dtype]}")


def _baddbmm_check(full) -> None:
    # ATen baddbmm: batches that differ fail as bmm's; then the input against them (the
    # meta function, TypeMeta names); then the kernel's dispatch
    self, b1, b2 = _t(full[0]), _t(full[1]), _t(full[2])
    if self is None or b1 is None or b2 is None:
        return
    if b1.dtype != b2.dtype:
        _bmm_check([b1, b2], "baddbmm")
    if self.dtype != b1.dtype:
        raise RuntimeError(
            f"Input dtypes must be the same, got: input {TYPE_META_NAME[self.dtype]}, "
            f"batch1: {TYPE_META_NAME[b1.dtype]}, batch2: {TYPE_META_NAME[b2.dtype]}"
        )
    _bmm_check([b1, b2], "baddbmm")


def _addmv_dtypes(result, mat, vec) -> None:
    # ATen Blas.cpp addmv_out: result, mat and vec share one dtype; bool is refused
    dtypes = (result.dtype, mat.dtype, vec.dtype)
    if len(set(dtypes)) > 1:
        a, b, c = (SCALAR_TYPE_NAME[d] for d in dtypes)
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {a}, {b}, and {c}")
    if mat.dtype is torch.bool:
        raise _not_implemented("addmv_impl_cpu", mat.dtype)


def _mv_check(full) -> None:
    # mv runs addmv into a result made with vec's options
    mat, vec = _t(full[0]), _t(full[1])
    if mat is not None and vec is not None:
        _addmv_dtypes(vec, mat, vec)


def _addmv_check(full) -> None:
    self, mat, vec = _t(full[0]), _t(full[1]), _t(full[2])
    if self is not None and mat is not None and vec is not None:
        _addmv_dtypes(self, mat, vec)


def _dot_check(kernel: str):
    def check(full) -> None:
        # ATen Blas.cpp dot_check, then the kernel's dispatch (no bool)
        a, b = _t(full[0]), _t(full[1])
        if a is None or b is None:
            return
        if a.dtype != b.dtype:
            raise RuntimeError(
                "dot : expected both vectors to have same dtype, but found "
                f"{SCALAR_TYPE_NAME[a.dtype]} and {SCALAR_TYPE_NAME[b.dtype]}"
            )
        if a.dtype is torch.bool:
            raise _not_implemented(kernel, a.dtype)

    return check


def _heaviside_check(full) -> None:
    # ATen BinaryOps.cpp heaviside meta
    a, b = _t(full[0]), _t(full[1])
    if a is None or b is None:
        return
    if a.dtype.is_complex or b.dtype.is_complex:
        raise RuntimeError("heaviside is not yet implemented for complex tensors.")
    if a.dtype != b.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")


def _lerp_check(tensor_weight: bool):
    # ATen Lerp.cpp lerp meta (end, then weight, printed as TypeMeta names), then the CPU
    # kernel's dispatch over floating and complex types only
    def check(full) -> None:
        self, end, weight = _t(full[0]), _t(full[1]), full[2]
        if self is None or end is None:
            return
        if end.dtype != self.dtype:
            raise RuntimeError(
                f"expected dtype {TYPE_META_NAME[self.dtype]} for `end` but got dtype {TYPE_META_NAME[end.dtype]}"
            )
        if tensor_weight and isinstance(weight, torch.Tensor) and weight.dtype != self.dtype:
            raise RuntimeError(
                f"expected dtype {TYPE_META_NAME[self.dtype]} for `weight` but got dtype {TYPE_META_NAME[weight.dtype]}"
            )
        if _integral(self.dtype):
            raise _not_implemented("lerp_kernel_tensor" if tensor_weight else "lerp_kernel_scalar", self.dtype)

    return check


def _prelu_check(full) -> None:
    # ATen Activation.cpp _prelu_kernel: floating types only
    x = _t(full[0])
    if x is not None and not x.dtype.is_floating_point:
        raise _not_implemented("prelu_cpu", x.dtype)


def _mse_check(full) -> None:
    # ATen Loss.cpp mse_loss: its CPU kernel takes floating types only (of the promoted dtype)
    a, b = _t(full[0]), _t(full[1])
    if a is not None and b is not None:
        dtype = torch.promote_types(a.dtype, b.dtype)
        if not dtype.is_floating_point:
            raise _not_implemented("mse_cpu", dtype)


def _nll_target_check(target_pos: int):
    # ATen LossNLL.cpp nll_loss_forward/backward: class indices as int64 or uint8 (a uint8
    # target is widened before the kernels, dispatch/uint8_operands.py); then the CPU kernel
    # reads the weight as the input's type
    def check(full) -> None:
        target = _t(full[target_pos])
        if target is not None and target.dtype not in (torch.int64, torch.uint8):
            raise RuntimeError(f"expected target dtype to be Long or Byte, but got {SCALAR_TYPE_NAME[target.dtype]}")
        x, weight = _t(full[target_pos - 1]), _t(full[target_pos + 1])
        if x is not None and weight is not None and weight.dtype != x.dtype:
            raise RuntimeError(
                f"expected scalar type {SCALAR_TYPE_NAME[x.dtype]} but found {SCALAR_TYPE_NAME[weight.dtype]}"
            )

    return check


def _where_check(full) -> None:
    # ATen TensorCompare.cpp where: a bool condition (uint8 is widened first, with ATen's
    # deprecation warning: dispatch/uint8_operands.py)
    cond = _t(full[0])
    if cond is not None and cond.dtype is not torch.bool:
        raise RuntimeError(
            "where expected condition to be a boolean tensor, but got a tensor with dtype "
            f"{SCALAR_TYPE_NAME[cond.dtype]}"
        )


def _no_bool(kernel: str):
    # unary kernels CPU dispatches over numbers only (abs, rounding): bool is refused
    def check(full) -> None:
        x = _t(full[0])
        if x is not None and x.dtype is torch.bool:
            raise _not_implemented(kernel, x.dtype)

    return check


def _relu_check(full) -> None:
    # ATen Activation.cpp relu: a device-generic check, before any kernel
    x = _t(full[0])
    if x is not None and x.dtype is torch.bool:
        raise RuntimeError("Boolean inputs not supported for relu")


def _softmax_check(name: str):
    # ATen SoftMax.cpp: the CPU kernels dispatch over floating types only, named after
    # whether the softmax runs over the last dim
    def check(full) -> None:
        x, dim = _t(full[0]), full[1]
        if x is None or x.dtype.is_floating_point or type(dim) is not int:
            return
        n = max(x.dim(), 1)
        if not -n <= dim < n:
            return  # the meta function raises the out-of-range error
        last = dim % n == n - 1
        raise _not_implemented(f"{name}_lastdim_kernel_impl" if last else f"{name}_kernel_impl", x.dtype)

    return check


def _mean_check(dtype_pos: int):
    # ATen ReduceOps.cpp mean: the result dtype must be floating or complex (the meta function
    # prints torch's dtype names, "Got: torch.int64" where ATen says "Got: Long")
    def check(full) -> None:
        x, dtype = _t(full[0]), full[dtype_pos] if len(full) > dtype_pos else None
        if x is None:
            return
        which, dt = ("Optional", dtype) if isinstance(dtype, torch.dtype) else ("Input", x.dtype)
        if not (dt.is_floating_point or dt.is_complex):
            raise RuntimeError(
                f"mean(): could not infer output dtype. {which} dtype must be either a floating point or "
                f"complex dtype. Got: {SCALAR_TYPE_NAME[dt]}"
            )

    return check


def _normal_std_check(std_pos: int, result_of_std: bool):
    # ATen normal: a complex std tensor is refused first (the meta functions take it); with a
    # Python mean the result takes std's dtype, which the CPU kernel must fill (ral drew float32)
    def check(full) -> None:
        std = _t(full[std_pos])
        if std is None:
            return
        if std.dtype.is_complex:
            raise RuntimeError("normal expects standard deviation to be non-complex")
        if result_of_std and not std.dtype.is_floating_point:
            raise _not_implemented("normal_kernel_cpu", std.dtype)

    return check


def _bernoulli_check(p_pos: int | None):
    # ATen bernoulli_(Tensor p): the CPU kernel dispatches on self's dtype (no complex), then
    # on p's (floating only); bernoulli(self) draws with p = self
    def check(full) -> None:
        x = _t(full[0])
        p = x if p_pos is None else _t(full[p_pos])
        if x is not None and x.dtype.is_complex:
            raise _not_implemented("bernoulli_tensor_cpu_self_", x.dtype)
        if p is not None and not p.dtype.is_floating_point:
            raise _not_implemented("bernoulli_tensor_cpu_p_", p.dtype)

    return check


def _huber_result_check(full) -> None:
    # ATen huber_loss writes into a tensor of the input's dtype, checked before its kernel
    # dispatches: a common dtype that cannot be cast back (an integer input with a floating
    # target, a complex target) is refused (smooth_l1_loss takes the common dtype instead)
    x, target = _t(full[0]), _t(full[1])
    if x is None or target is None:
        return
    common = torch.promote_types(x.dtype, target.dtype)
    if not torch.can_cast(common, x.dtype):
        raise RuntimeError(
            f"result type {SCALAR_TYPE_NAME[common]} can't be cast to the desired output type {SCALAR_TYPE_NAME[x.dtype]}"
        )


# op name (as the router's schemas name it) -> check of the normalized arguments
DTYPE_CHECKS = {}
for _sfx in ("", ".out"):
    DTYPE_CHECKS[f"aten::mm{_sfx}"] = _mm_check
    DTYPE_CHECKS[f"aten::bmm{_sfx}"] = _bmm_check
    DTYPE_CHECKS[f"aten::mv{_sfx}"] = _mv_check
    DTYPE_CHECKS[f"aten::dot{_sfx}"] = _dot_check("dot")
    DTYPE_CHECKS[f"aten::vdot{_sfx}"] = _dot_check("vdot")
    DTYPE_CHECKS[f"aten::mse_loss{_sfx}"] = _mse_check
for _sfx in ("", "_", ".out"):
    DTYPE_CHECKS[f"aten::addmm{_sfx}"] = _addmm_check
    DTYPE_CHECKS[f"aten::baddbmm{_sfx}"] = _baddbmm_check
    DTYPE_CHECKS[f"aten::addmv{_sfx}"] = _addmv_check
    DTYPE_CHECKS[f"aten::heaviside{_sfx}"] = _heaviside_check
for _overload, _tensor_weight in (("Scalar", False), ("Tensor", True)):
    for _name in (f"lerp.{_overload}", f"lerp_.{_overload}", f"lerp.{_overload}_out"):
        DTYPE_CHECKS[f"aten::{_name}"] = _lerp_check(_tensor_weight)
_UNARY_KERNELS = {
    "abs": "abs_cpu",
    "ceil": "ceil_vml_cpu",
    "floor": "floor_vml_cpu",
    "round": "round_vml_cpu",
    "trunc": "trunc_vml_cpu",
}
for _op, _kernel in _UNARY_KERNELS.items():
    for _sfx in ("", "_", ".out"):
        DTYPE_CHECKS[f"aten::{_op}{_sfx}"] = _no_bool(_kernel)
for _name in ("round.decimals", "round_.decimals", "round.decimals_out"):
    DTYPE_CHECKS[f"aten::{_name}"] = _no_bool("round_cpu")
DTYPE_CHECKS["aten::relu"] = _relu_check
DTYPE_CHECKS["aten::relu_"] = _relu_check
for _op, _name in (("_softmax", "softmax"), ("_log_softmax", "log_softmax")):
    DTYPE_CHECKS[f"aten::{_op}"] = _softmax_check(_name)
    DTYPE_CHECKS[f"aten::{_op}.out"] = _softmax_check(_name)
DTYPE_CHECKS["aten::mean"] = _mean_check(1)
DTYPE_CHECKS["aten::mean.dim"] = _mean_check(3)
DTYPE_CHECKS["aten::mean.out"] = _mean_check(3)
DTYPE_CHECKS["aten::_prelu_kernel"] = _prelu_check
DTYPE_CHECKS["aten::huber_loss"] = _huber_result_check
DTYPE_CHECKS["aten::where.self"] = _where_check
DTYPE_CHECKS["aten::where.self_out"] = _where_check
for _name in ("Tensor_Tensor", "Tensor_Tensor_out", "float_Tensor", "float_Tensor_out"):
    DTYPE_CHECKS[f"aten::normal.{_name}"] = _normal_std_check(1, _name == "float_Tensor")
for _name, _p_at in (
    ("bernoulli", None),
    ("bernoulli.out", None),
    ("bernoulli.Tensor", 1),
    ("bernoulli.Tensor_out", 1),
):
    DTYPE_CHECKS[f"aten::{_name}"] = _bernoulli_check(_p_at)
DTYPE_CHECKS["aten::bernoulli_.Tensor"] = _bernoulli_check(1)
for _name, _target_at in (
    ("nll_loss_forward", 1),
    ("nll_loss_forward.output", 1),
    ("nll_loss_backward", 2),
    ("nll_loss_backward.grad_input", 2),
):
    DTYPE_CHECKS[f"aten::{_name}"] = _nll_target_check(_target_at)


def _kernel_dtypes(kernel: str, takes, operands: int = 1):
    # AT_DISPATCH inside CPU's kernel, over the common dtype of its first `operands` tensor
    # arguments (addcmul(bool, float, float) runs in float32); argument_checks chains these
    # after the op's other checks
    def check(full) -> None:
        tensors = [t for t in full[:operands] if isinstance(t, torch.Tensor)]
        if not tensors:
            return
        dtype = tensors[0].dtype
        for t in tensors[1:]:
            dtype = torch.promote_types(dtype, t.dtype)
        if not takes(dtype):
            raise _not_implemented(kernel, dtype)

    return check


def _floating(d: torch.dtype) -> bool:
    return d.is_floating_point


def _floating_or_complex(d: torch.dtype) -> bool:
    return d.is_floating_point or d.is_complex


def _floating_or_uint8(d: torch.dtype) -> bool:
    return d.is_floating_point or d is torch.uint8


def _floating_or_int64(d: torch.dtype) -> bool:
    return d.is_floating_point or d is torch.int64


def _not_bool(d: torch.dtype) -> bool:
    return d is not torch.bool


def _not_complex(d: torch.dtype) -> bool:
    return not d.is_complex


def _number(d: torch.dtype) -> bool:
    return d is not torch.bool and not d.is_complex


_OUT = ("", ".out")
_INPLACE_OUT = ("", "_", ".out")
_VEC_OUT = ("", ".out", ".vec")
# Kernels whose CPU dispatch list is narrower than what the router's meta planning lets
# through (found by calling each aten op with 9 dtypes on CPU and on ral): op, its overload
# suffixes, the kernel name CPU prints, the dtypes it takes, and for kernels over several
# tensors how many leading ones share the dispatched dtype. Each list is also CUDA's but
# where a comment says otherwise. Left running as on CUDA: histc over integers, avg_pool3d in
# float16/bfloat16.
_KERNEL_DTYPES = (
    ("gelu", _INPLACE_OUT, "GeluKernelImpl", _floating),
    ("silu", _INPLACE_OUT, "silu_cpu", _floating_or_complex),
    ("hardswish", _INPLACE_OUT, "hardswish_cpu", _floating),
    ("hardsigmoid", _INPLACE_OUT, "hardsigmoid_cpu", _floating),
    ("leaky_relu", _INPLACE_OUT, "leaky_relu_cpu", _floating),
    ("celu", _INPLACE_OUT, "elu_cpu", _floating),
    ("glu", _OUT, "glu_cpu", _floating),
    ("huber_loss", _OUT, "huber_cpu", _floating, 2),
    ("smooth_l1_loss", _OUT, "smooth_l1_cpu", _floating, 2),
    ("threshold", _INPLACE_OUT, "threshold_cpu", _not_bool),
    ("addcmul", _INPLACE_OUT, "addcmul_cpu_out", _not_bool, 3),
    ("aminmax", _OUT, "aminmax_cpu", _not_complex),
    ("reflection_pad1d", _OUT, "reflection_pad1d", _not_bool),
    ("reflection_pad2d", _OUT, "reflection_pad2d", _not_bool),
    ("reflection_pad3d", _OUT, "reflection_pad3d", _not_bool),
    # CUDA takes uint8 too; CPU's 2-d kernel names its channels-last path for every layout
    ("upsample_nearest1d", _VEC_OUT, "compute_indices_weights_nearest", _floating_or_uint8),
    ("_upsample_nearest_exact1d", _VEC_OUT, "compute_indices_weights_nearest", _floating_or_uint8),
    ("upsample_nearest2d", _VEC_OUT, "upsample_nearest2d_channels_last", _floating_or_uint8),
    ("_upsample_nearest_exact2d", _VEC_OUT, "upsample_nearest2d_channels_last", _floating_or_uint8),
    ("upsample_nearest3d", _VEC_OUT, "compute_indices_weights_nearest", _floating_or_uint8),
    ("_upsample_nearest_exact3d", _VEC_OUT, "compute_indices_weights_nearest", _floating_or_uint8),
    ("upsample_bicubic2d", _VEC_OUT, "compute_indices_weights_cubic", _floating_or_uint8),
    ("_adaptive_avg_pool2d", _OUT, "adaptive_avg_pool2d", _floating),
    ("adaptive_max_pool2d", _OUT, "adaptive_max_pool2d", _floating),
    # CPU also takes int64 here (CUDA does not)
    ("avg_pool2d", _OUT, "avg_pool2d", _floating_or_int64),
    # CPU refuses float16/bfloat16 here, CUDA runs them (so does ral)
    ("avg_pool3d", _OUT, "avg_pool3d_out_frame", _floating_or_int64),
    # CPU takes floating types only; CUDA (and ral) integers too
    ("max_unpool2d", _OUT, "max_unpool2d", _number),
    ("max_unpool3d", _OUT, "max_unpool3d", _number),
    ("max_pool2d_with_indices_backward", ("", ".grad_input"), "max_pool2d_backward", _floating),
    ("adaptive_max_pool3d", _OUT, "adaptive_max_pool3d_cpu", _floating),
    ("nll_loss_forward", ("", ".output"), "nll_loss_out_frame", _floating),
    ("nll_loss2d_forward", ("", ".output"), "nll_loss2d_forward_out_frame", _floating),
    ("native_layer_norm", _OUT, "LayerNormKernelImpl", _floating),
    ("native_batch_norm", _OUT, "batch_norm", _floating),
)
# op name (as the router's schemas name it) -> check, run after the op's other checks
KERNEL_DTYPE_CHECKS = {
    f"aten::{op}{sfx}": _kernel_dtypes(kernel, takes, *operands)
    for op, sfxs, kernel, takes, *operands in _KERNEL_DTYPES
    for sfx in sfxs
}
