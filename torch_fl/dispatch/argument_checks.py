"""Argument checks CPU kernels make and PyTorch's meta functions do not.

The router plans a call from its meta result (tiers/vendor.py `meta_run`), so a check that
lives only in ATen's CPU/CUDA kernel would be skipped on ral and the call would return a
value where CPU raises. Each check here repeats one, with CPU's message and exception type.
They run when the router decides a signature (dtypes are part of the key): a call that
raises is never cached, so every such call raises.
"""

from __future__ import annotations

import torch

from torch_fl.dispatch.dtype_checks import DTYPE_CHECKS, KERNEL_DTYPE_CHECKS
from torch_fl.dispatch.shape_checks import SHAPE_CHECKS, convolution_params_check
from torch_fl.tiers.vendor import to_meta


def _dtype(v):
    if isinstance(v, torch.Tensor):
        return v.dtype
    return torch.bool if type(v) is bool else None


def _sub_check(full) -> None:
    # ATen BinaryOps.h sub_check: `-` on bool operands is refused, whatever the other one is.
    a, b = _dtype(full[0]), _dtype(full[1])
    if a is torch.bool and b is torch.bool:
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. "
            "Use the `^` or `logical_xor()` operator instead."
        )
    if a is torch.bool or b is torch.bool:
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )


def _index_select_check(full) -> None:
    # ATen index_select_out_cpu_: a vector index (IndexError), then its dtype; the meta
    # function checks neither, so an empty uint8 index returned an empty result.
    index = full[2]
    if not isinstance(index, torch.Tensor):
        return
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")


def _batch_norm_check(full) -> None:
    # ATen's CPU batch norm dereferences statistics the schema lets be None (torch 2.13:
    # SIGSEGV, the process dies): eval mode needs running_mean/running_var. The meta
    # function says so only as an AssertionError, and the cpu tier does not run it.
    if not full[5] and (full[3] is None or full[4] is None):
        raise RuntimeError("native_batch_norm: running_mean and running_var must not be None in eval mode")


def _batch_norm_backward_check(full) -> None:
    # As _batch_norm_check: CPU's backward dereferences save_mean/save_invstd in training
    # and running_mean/running_var in eval mode.
    train = full[7]
    if train and (full[5] is None or full[6] is None):
        raise RuntimeError("native_batch_norm_backward: save_mean and save_invstd must not be None in training")
    if not train and (full[3] is None or full[4] is None):
        raise RuntimeError("native_batch_norm_backward: running_mean and running_var must not be None in eval mode")


def _upsample_check(nd: int, backward: bool):
    """ATen's upsample_{1,2,3}d_common_check (and the forward's non-empty check) for an op over
    nd spatial dims. The meta functions and decompositions the router plans from raise other
    errors (ZeroDivisionError, IndexError, TypeError) or none for these calls."""
    axes = "DHW"[3 - nd :]

    def check(full) -> None:
        out_size = list(full[1])
        in_size = list(full[2]) if backward else list(full[0].shape)
        if len(out_size) != nd:
            raise RuntimeError(f"It is expected output_size equals to {nd}, but got size {len(out_size)}")
        if len(in_size) != nd + 2:
            raise RuntimeError(f"It is expected input_size equals to {nd + 2}, but got size {len(in_size)}")
        if min(in_size[2:] + out_size) <= 0:
            got_in = ", ".join(f"{a}: {n}" for a, n in zip(axes, in_size[2:]))
            got_out = ", ".join(f"{a}: {n}" for a, n in zip(axes, out_size))
            joint = " and" if nd == 1 else ""
            raise RuntimeError(
                f"Input and output sizes should be greater than 0, but got input ({got_in}){joint} output ({got_out})"
            )
        if not backward and full[0].numel() == 0 and 0 in in_size[1:]:  # after the sizes, as ATen's meta
            raise RuntimeError(f"Non-empty {nd + 2}D data tensor expected but got a tensor with sizes {in_size}")

    return check


# each upsampling op the plugins serve (plugins/common/resample.h RAL_UPSAMPLE_OPS) -> its dims
_UPSAMPLES = {
    "upsample_nearest1d": 1, "_upsample_nearest_exact1d": 1, "upsample_linear1d": 1,
    "upsample_nearest2d": 2, "_upsample_nearest_exact2d": 2, "upsample_bilinear2d": 2, "upsample_bicubic2d": 2,
    "upsample_nearest3d": 3, "_upsample_nearest_exact3d": 3, "upsample_trilinear3d": 3,
}  # fmt: skip


def _convolution_check(full) -> None:
    # ATen Convolution.cpp check_input_same_type_as_parameters (CPU's backends call it, or
    # for some shapes refuse the mix with "expected scalar type"; the meta function does not):
    # a float32 input with float16 weights ran on ral. Type names as Python gives them.
    x, w = full[0], full[1]
    if isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and x.dtype != w.dtype:
        names = [torch.empty(0, dtype=t.dtype).type() for t in (x, w)]
        raise RuntimeError(
            f"Input type ({names[0]}) and weight type ({names[1]}) should be the same "
            "or input should be a MKLDNN tensor and weight is a dense tensor"
        )


def _alpha_check(full) -> None:
    # ATen BinaryOps.h alpha_check, on the operands' common dtype. The meta path is
    # torch._refs.add, which raises ValueError ("alpha argument of type <class 'float'> cannot
    # be safely cast ...") where CPU raises RuntimeError with this message.
    alpha = full[2]
    # meta stand-ins: torch.result_type on a device tensor would dispatch an op of its own
    a, b = to_meta(full[0]), to_meta(full[1])
    dtype = torch.result_type(a, b) if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) else None
    if dtype is None or alpha is None:
        return
    if type(alpha) is bool and dtype != torch.bool:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if type(alpha) is float and not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if type(alpha) is complex and not dtype.is_complex:
        raise RuntimeError("For non-complex input tensors, argument alpha must not be a complex number.")


def _sub_and_alpha_check(full) -> None:
    _sub_check(full)
    _alpha_check(full)


def _addcdiv_check(full) -> None:
    # ATen PointwiseOps.cpp addcdiv: integer division refused. The meta function raises the
    # same text as a Python tuple (its message lambda returns a tuple of the pieces).
    t1, t2 = _dtype(full[1]), _dtype(full[2])
    if t1 is not None and t2 is not None and not (t1.is_floating_point or t1.is_complex):
        if not (t2.is_floating_point or t2.is_complex):
            raise RuntimeError(
                "Integer division with addcdiv is no longer supported, and in a future  "
                "release addcdiv will perform a true division of tensor1 and tensor2. "
                "The historic addcdiv behavior can be implemented as "
                "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) "
                "for integer inputs and as (input + value * tensor1 / tensor2) for float inputs. "
                "The future addcdiv behavior is just the latter implementation: "
                "(input + value * tensor1 / tensor2), for all dtypes."
            )


def _repeated_dims_check(full) -> None:
    # ATen dim_list_to_bitset (WrapDimUtilsMulti.h): a dim listed twice, after wrapping. The
    # meta path (torch._prims_common) says "duplicate value in the list of dims" instead.
    x, dims = full[0], full[1]
    if not isinstance(x, torch.Tensor) or not isinstance(dims, (list, tuple)):
        return
    n = max(x.dim(), 1)
    seen = set()
    for d in dims:
        if not -n <= d < n:
            return  # the meta function raises the out-of-range error
        w = d % n
        if w in seen:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        seen.add(w)


def _zero_size_reduction_check(fn: str, wrap: bool):
    # ATen zero_numel_check_dims for reductions without an identity (ReduceOps.cpp): an empty
    # input reduced over a zero-size dim raises IndexError naming that dim (as given, or
    # wrapped for max/min.dim). Their meta functions raise RuntimeError with other messages
    # ("reducing over zero-size dimension ..."), and max.dim/min.dim reached the host kernel.
    def check(full) -> None:
        x, dims = full[0], full[1]
        if not isinstance(x, torch.Tensor) or x.numel() != 0 or x.dim() == 0:
            return
        if dims is None or (isinstance(dims, (list, tuple)) and not dims):
            if fn in ("argmax()", "argmin()"):
                raise IndexError(f"{fn}: Expected reduction dim to be specified for input.numel() == 0.")
            raise RuntimeError(
                f"{fn}: Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument."
            )
        for d in dims if isinstance(dims, (list, tuple)) else (dims,):
            if not -x.dim() <= d < x.dim():
                return  # the meta function raises the out-of-range error
            if x.shape[d] == 0:
                shown = d % x.dim() if wrap else d
                raise IndexError(f"{fn}: Expected reduction dim {shown} to have non-zero size.")

    return check


def _bool_clamp_check(kernel: str, tensor_bounds: bool, n_bounds: int = 2):
    # ATen's CPU (and CUDA) clamp kernels dispatch over every dtype but bool; the meta
    # function accepts bool, so ral clamped where CPU raises NotImplementedError. The
    # one-tensor-bound forms are maximum/minimum, which take bool (as on CPU).
    def check(full) -> None:
        t, bounds = full[0], [v for v in full[1 : 1 + n_bounds] if v is not None]
        if t.dtype is not torch.bool or not bounds or any(_dtype(v) is not torch.bool for v in bounds):
            return  # a non-bool bound promotes (in place, the cast check refuses it first)
        if tensor_bounds:
            if len(bounds) == 2:
                raise NotImplementedError(f"\"{kernel}_cpu\" not implemented for 'Bool'")
            return
        name = kernel
        if n_bounds == 2 and len(bounds) == 1:  # clamp with one bound runs clamp_min/clamp_max
            name = "clamp_min" if full[1] is not None else "clamp_max"
        raise NotImplementedError(f"\"{name}_scalar_cpu\" not implemented for 'Bool'")

    return check


_SUBTRACTIONS = ("sub.Tensor", "sub_.Tensor", "sub.out", "sub.Scalar", "sub_.Scalar", "rsub.Tensor", "rsub.Scalar")
_ADDITIONS = ("add.Tensor", "add_.Tensor", "add.out", "add.Scalar", "add_.Scalar")
# op name (as the router's schemas name it) -> check of the normalized arguments
CHECKS = {f"aten::{name}": _sub_and_alpha_check for name in _SUBTRACTIONS}
CHECKS.update({f"aten::{name}": _alpha_check for name in _ADDITIONS})
CHECKS.update({f"aten::{name}": _addcdiv_check for name in ("addcdiv", "addcdiv_", "addcdiv.out")})
for _op, _wrap in (("amax", False), ("amin", False), ("argmax", True), ("argmin", True), ("max", True), ("min", True)):
    _overloads = (f"{_op}.dim", f"{_op}.dim_{_op}") if _op in ("max", "min") else (_op, f"{_op}.out")
    for _name in _overloads:
        CHECKS[f"aten::{_name}"] = _zero_size_reduction_check(f"{_op}()", _wrap)


def _chain(*checks):
    def check(full) -> None:
        for c in checks:
            c(full)

    return check


for _name in (
    "sum.dim_IntList",
    "sum.IntList_out",
    "mean.dim",
    "mean.out",
    "var.correction",
    "var.correction_out",
    "any.dims",
    "all.dims",
):
    CHECKS[f"aten::{_name}"] = _repeated_dims_check
for _name in ("amax", "amax.out", "amin", "amin.out"):
    CHECKS[f"aten::{_name}"] = _chain(CHECKS[f"aten::{_name}"], _repeated_dims_check)  # CPU checks sizes first
for _sfx in ("", "_", ".out"):
    CHECKS[f"aten::clamp{_sfx}"] = _bool_clamp_check("clamp", False)
    CHECKS[f"aten::clamp_min{_sfx}"] = _bool_clamp_check("clamp_min", False, 1)
    CHECKS[f"aten::clamp_max{_sfx}"] = _bool_clamp_check("clamp_max", False, 1)
for _name in ("clamp.Tensor", "clamp_.Tensor", "clamp.Tensor_out"):
    CHECKS[f"aten::{_name}"] = _bool_clamp_check("clamp", True)


def _full_reduction_check(fn: str):
    # max()/min() of every element (tiers/decomp.py runs them as amax/amin): an empty input
    # is refused with their own name, as _zero_size_reduction_check words it for no dims
    dims_check = _zero_size_reduction_check(fn, True)

    def check(full) -> None:
        dims_check([full[0], None])

    return check


for _op in ("max", "min"):
    CHECKS[f"aten::{_op}"] = _full_reduction_check(f"{_op}()")
CHECKS["aten::index_select"] = _index_select_check
CHECKS["aten::convolution"] = _chain(_convolution_check, convolution_params_check)
CHECKS["aten::native_batch_norm"] = _batch_norm_check
CHECKS["aten::native_batch_norm_backward"] = _batch_norm_backward_check
for _name, _nd in _UPSAMPLES.items():
    CHECKS[f"aten::{_name}"] = _upsample_check(_nd, False)
    CHECKS[f"aten::{_name}_backward"] = _upsample_check(_nd, True)
# Every check of this module is in CHECKS by now, so the merges below chain onto it rather
# than being overwritten by a later assignment.
for _name, _check in (*DTYPE_CHECKS.items(), *SHAPE_CHECKS.items()):
    # an op with a check above too runs both: its dtype first, as ATen checks it first
    CHECKS[_name] = _chain(_check, CHECKS[_name]) if _name in CHECKS else _check
for _name, _check in KERNEL_DTYPE_CHECKS.items():
    # a kernel's dtype dispatch comes after the op's argument checks (its shape checks in the
    # meta function still come later here: a call with a refused dtype and a malformed shape
    # reports the dtype, where CPU reports the shape; the meta functions' own dtype rules
    # differ from CPU's too often to run them first)
    CHECKS[_name] = _chain(CHECKS[_name], _check) if _name in CHECKS else _check


def check_arguments(op: str, full) -> None:
    """Raise CPU's error for a call CPU's kernel refuses and the meta function lets through."""
    check = CHECKS.get(op)
    if check is not None:
        check(full)
