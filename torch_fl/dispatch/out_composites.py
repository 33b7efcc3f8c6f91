"""out= forms of composite ops that PyTorch leaves unwritten for tensors with Python dispatch.

ATen's `linalg_matrix_rank` out kernels resize `out`, then rebind their local handle to a fresh
result instead of writing it (torch 2.9-2.13). CPU and CUDA tensors take another path and come
out right; a wrapper subclass (or any TorchDispatchMode) takes the composite, so
`torch.linalg.matrix_rank(x, out=o)` on ral returned o's uninitialized memory. Each such out=
overload gets a kernel on ral's autograd key that computes the functional form and writes it
into `out` under ATen's out= contract: same device, a safe cast, resized (with ATen's warning
when `out` had elements).
"""

from __future__ import annotations

import warnings

import torch

from torch_fl.device.dtypes import SCALAR_TYPE_NAME

_lib = None

# (op, out overload, functional overload, name ATen's checks print)
_OUT_COMPOSITES = (
    ("linalg_matrix_rank", "atol_rtol_tensor_out", "atol_rtol_tensor", "torch.linalg.matrix_rank"),
    ("linalg_matrix_rank", "atol_rtol_float_out", "atol_rtol_float", "torch.linalg.matrix_rank"),
    ("linalg_matrix_rank", "out", "default", "torch.linalg.matrix_rank"),
    ("linalg_matrix_rank", "out_tol_tensor", "tol_tensor", "torch.linalg.matrix_rank"),
)


def _resize_output(out: torch.Tensor, shape: torch.Size) -> None:
    # ATen's at::native::resize_output: a non-empty out of another shape is resized with a warning
    if out.shape == shape:
        return
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(out.shape)}, which does "
            f"not match the required output shape {list(shape)}. This behavior is deprecated, and in a future "
            "PyTorch release outputs will not be resized unless they have zero elements. You can explicitly "
            "reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).",
            UserWarning,
            stacklevel=3,
        )
    out.resize_(shape)


def _written_out(functional, fn_name: str):
    """A kernel for an out= overload: the functional result, copied into `out`."""

    def kernel(*args, out, **kwargs):
        x = args[0]
        if out.device != x.device:  # ATen's checkSameDevice
            raise RuntimeError(
                f"{fn_name}: Expected result and input tensors to be on the same device, but got result on "
                f"{out.device} and input on {x.device}"
            )
        with torch.no_grad():
            result = functional(*args, **kwargs)
        if not torch.can_cast(result.dtype, out.dtype):  # ATen's checkLinalgCompatibleDtype
            raise RuntimeError(
                f"{fn_name}: Expected result to be safely castable from {SCALAR_TYPE_NAME[result.dtype]} dtype, "
                f"but got result with dtype {SCALAR_TYPE_NAME[out.dtype]}"
            )
        _resize_output(out, result.shape)
        with torch.no_grad():
            out.copy_(result)
        return out

    return kernel


def register() -> None:
    """Register the out= kernels once per process."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    for op, out_overload, functional, fn_name in _OUT_COMPOSITES:
        packet = getattr(torch.ops.aten, op)
        kernel = _written_out(getattr(packet, functional), fn_name)
        _lib.impl(f"{op}.{out_overload}", kernel, "AutogradPrivateUse1")
