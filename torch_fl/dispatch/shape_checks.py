"""Shape and parameter checks CPU makes and PyTorch's meta functions skip or word otherwise.

Found by running op_db's error_inputs (PyTorch's own list of calls that must fail, with the
message each must give) on ral: index_add broadcast a source CPU refuses, embedding raised
AssertionError, convolutions and cat raised other errors first, and every broadcasting
mismatch read "Attempting to broadcast a dimension..." (torch._refs) where CPU and CUDA say
"The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 0".
argument_checks.py merges CHECKS; the router translates the broadcast message.
"""

from __future__ import annotations

import torch


def _sizes(t: torch.Tensor) -> str:
    return "[" + ", ".join(map(str, t.shape)) + "]"


def _index_add_check(full) -> None:
    # ATen index_func_meta_impl: source has self's shape except along dim (the meta function
    # lets a broadcastable source through, and ral added it)
    self, dim, source = full[0], full[1], full[3]
    if not isinstance(self, torch.Tensor) or not isinstance(source, torch.Tensor) or type(dim) is not int:
        return
    self_sizes, source_sizes = list(self.shape), list(source.shape)
    if source.dim() != 0 and self.dim() != 0:
        if not -self.dim() <= dim < self.dim() or not -source.dim() <= dim < source.dim():
            return  # the meta function raises the out-of-range error
        del self_sizes[dim % self.dim()], source_sizes[dim % source.dim()]
    if self_sizes != source_sizes:
        raise RuntimeError(
            "source tensor shape must match self tensor shape, excluding the specified dimension. "
            f"Got self.shape = {_sizes(self)} source.shape = {_sizes(source)}"
        )


def _embedding_check(full) -> None:
    # ATen Embedding.cpp: checked before the lookup (the decomposition asserts instead)
    weight = full[0]
    if isinstance(weight, torch.Tensor) and weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")


def convolution_params_check(full) -> None:
    """ATen Convolution.cpp's parameter checks (_convolution, check_shape_forward): weight rank,
    stride, padding, dilation, then groups against the weight's first dim; the meta function
    starts with its channel checks instead."""
    weight, stride, padding, dilation, transposed, output_padding, groups = (full[1], *full[3:9])
    if not isinstance(weight, torch.Tensor):
        return
    if weight.dim() < 3:
        raise RuntimeError("weight should have at least three dimensions")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if not transposed and any(d <= 0 for d in dilation):  # transposed kernels word it per axis
        # CPU runs a 1-d convolution as a 2-d one and prints the widened list
        shown = [1, *dilation] if len(dilation) == 1 else list(dilation)
        raise RuntimeError(f"dilation should be greater than zero, but got {shown}")
    if not transposed and groups > 0:
        if weight.shape[0] < groups:
            raise RuntimeError(
                f"Given groups={groups}, expected weight to be at least {groups} at dimension 0, "
                f"but got weight of size {_sizes(weight)} instead"
            )
        if weight.shape[0] % groups:
            raise RuntimeError(
                f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                f"but got weight of size [{_sizes(weight)}] instead"  # ATen's own doubled brackets
            )


def _cat_check(full) -> None:
    # ATen cat meta: no 0-dim tensor, then every tensor (but legacy empty 1-d ones) with the
    # first's number of dims
    tensors = full[0]
    if not isinstance(tensors, (list, tuple)):
        return
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor) and t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    kept = [t for t in tensors if isinstance(t, torch.Tensor) and not (t.dim() == 1 and t.shape[0] == 0)]
    for t in kept[1:]:
        if t.dim() != kept[0].dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {kept[0].dim()} and {t.dim()}")


def _max_pool2d_check(full) -> None:
    # ATen max_pool2d_with_indices meta checks the rank first (the meta function raised
    # IndexError for a 2-d input); its later checks are the meta function's
    x = full[0]
    if isinstance(x, torch.Tensor) and x.dim() not in (3, 4):
        raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")


def _nll_loss_weight_check(full) -> None:
    # ATen nll_loss_forward meta: one weight per class (the decomposition asserted)
    x, weight = full[0], full[2]
    if isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor) and 0 < x.dim() <= 2:
        n_classes = x.shape[-1]
        if weight.dim() != 1 or weight.numel() != n_classes:
            raise RuntimeError(
                f"weight tensor should be defined either for all {n_classes} classes or no classes "
                f"but got weight tensor of shape: {_sizes(weight)}"
            )


_REFS_BROADCAST = "Attempting to broadcast a dimension of length"


def cpu_broadcast_error(exc: Exception, sch, full) -> Exception:
    """CPU's error for a broadcasting mismatch that PyTorch's refs reported in their words:
    ATen's infer_size folded over the call's input tensors in order (TensorIterator's), else exc."""
    if not isinstance(exc, RuntimeError) or not str(exc).startswith(_REFS_BROADCAST):
        return exc
    shape: list[int] = []
    for i, t in enumerate(full):
        if not isinstance(t, torch.Tensor) or i in sch.out_positions:
            continue
        b = list(t.shape)
        ndim = max(len(shape), len(b))
        out = [1] * ndim
        for k in range(ndim - 1, -1, -1):
            offset = ndim - 1 - k
            size_a = shape[len(shape) - 1 - offset] if offset < len(shape) else 1
            size_b = b[len(b) - 1 - offset] if offset < len(b) else 1
            if size_a != size_b and size_a != 1 and size_b != 1:
                return RuntimeError(
                    f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b}) "
                    f"at non-singleton dimension {k}"
                )
            out[k] = size_b if size_a == 1 else size_a
        shape = out
    return exc


# op name (as the router's schemas name it) -> check of the normalized arguments
SHAPE_CHECKS = {f"aten::index_add{sfx}": _index_add_check for sfx in ("", "_", ".out")}
SHAPE_CHECKS["aten::embedding"] = _embedding_check
SHAPE_CHECKS["aten::cat"] = _cat_check
SHAPE_CHECKS["aten::cat.out"] = _cat_check
SHAPE_CHECKS["aten::max_pool2d_with_indices"] = _max_pool2d_check
SHAPE_CHECKS["aten::max_pool2d"] = _max_pool2d_check
SHAPE_CHECKS["aten::nll_loss_forward"] = _nll_loss_weight_check
SHAPE_CHECKS["aten::nll_loss_forward.output"] = _nll_loss_weight_check
