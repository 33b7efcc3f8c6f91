"""Argument checks CPU kernels make and PyTorch's meta functions do not.

The router plans a call from its meta result (tiers/vendor.py `meta_run`), so a check that
lives only in ATen's CPU/CUDA kernel would be skipped on ral and the call would return a
value where CPU raises. Each check here repeats one, with CPU's message and exception type.
They run when the router decides a signature (dtypes are part of the key): a call that
raises is never cached, so every such call raises.
"""

from __future__ import annotations

import torch


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


_SUBTRACTIONS = ("sub.Tensor", "sub_.Tensor", "sub.out", "sub.Scalar", "sub_.Scalar", "rsub.Tensor", "rsub.Scalar")
# op name (as the router's schemas name it) -> check of the normalized arguments
CHECKS = {f"aten::{name}": _sub_check for name in _SUBTRACTIONS}
CHECKS["aten::index_select"] = _index_select_check
CHECKS["aten::native_batch_norm"] = _batch_norm_check
CHECKS["aten::native_batch_norm_backward"] = _batch_norm_backward_check


def check_arguments(op: str, full) -> None:
    """Raise CPU's error for a call CPU's kernel refuses and the meta function lets through."""
    check = CHECKS.get(op)
    if check is not None:
        check(full)
