"""Ops the router never sees: views, transfers, scalars and a few metadata-only ops."""

from __future__ import annotations

import torch

from . import transfer
from .errors import UnsupportedError
from .tensor import RalTensor, wrap
from .views import alias, as_strided, view_op

aten = torch.ops.aten


def _device_index(device, default: int) -> int | None:
    """ral index of a device argument, None for a non-ral device, `default` when absent."""
    if device is None:
        return default
    device = torch.device(device)
    if device.type == "ral" or device.type == "privateuseone":
        return device.index if device.index is not None else default
    return None


def _to_copy(func, args, kwargs):
    src = args[0]
    dtype = kwargs.get("dtype") or src.dtype
    src_dev = src._dev if type(src) is RalTensor else None
    target = _device_index(kwargs.get("device"), src_dev if src_dev is not None else 0)
    if target is None:  # to CPU
        out = transfer.to_cpu(src)
        return out if out.dtype == dtype else out.to(dtype)
    if src_dev is None:  # a CPU tensor (0-dim scalar or a mode upload)
        return transfer.to_device(src, target, dtype)
    out = transfer.empty_on(target, src.shape, dtype)
    return transfer.copy_into(out, src) if target != src_dev else aten.copy_.default(out, src)


def _copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    done = transfer.copy_into(dst, src, kwargs.get("non_blocking", False))
    if done is not None:
        return done
    from .dispatch import route

    return route(func, args, kwargs)


def _local_scalar_dense(func, args, kwargs):
    return transfer.to_cpu(args[0]).item()


def _lift_fresh(func, args, kwargs):
    return args[0]


def _like_factory(fill):
    def handler(func, args, kwargs):
        src = args[0]
        dtype = kwargs.get("dtype") or src.dtype
        target = _device_index(kwargs.get("device"), src._dev)
        if target is None:
            cpu_kwargs = dict(kwargs)
            return func(torch.empty(src.shape, dtype=src.dtype), *args[1:], **cpu_kwargs)
        out = transfer.empty_on(target, src.shape, dtype)
        if fill is not None:
            fill(out, args, kwargs)
        if kwargs.get("requires_grad"):
            out.requires_grad_(True)
        return out

    return handler


def _sdp_choice(func, args, kwargs):
    # No fused attention kernel is exposed through the ABI: use the math path, which
    # decomposes into matmul/softmax ops that plugins do implement.
    return int(torch.nn.attention.SDPBackend.MATH)


def _noop(func, args, kwargs):
    return None


def _false(func, args, kwargs):
    return False


def _unsupported_metadata_mutation(func, args, kwargs):
    raise UnsupportedError(
        f"RAL_ERROR_UNSUPPORTED: {func} changes a tensor's shape/strides in place, which ral "
        "tensors do not support; use the out-of-place form (e.g. x = x.t() instead of x.t_())",
        op=str(func),
    )


def _detach_(func, args, kwargs):
    return args[0]


SPECIAL: dict = {
    aten.detach.default: alias,
    aten.alias.default: alias,
    aten.as_strided.default: as_strided,
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy_,
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.lift_fresh.default: _lift_fresh,
    aten.empty_like.default: _like_factory(None),
    aten.zeros_like.default: _like_factory(lambda out, a, k: aten.zero_.default(out)),
    aten.ones_like.default: _like_factory(lambda out, a, k: aten.fill_.Scalar(out, 1)),
    aten.full_like.default: _like_factory(lambda out, a, k: aten.fill_.Scalar(out, a[1])),
    aten._fused_sdp_choice.default: _sdp_choice,
    aten.record_stream.default: _noop,
    aten.is_pinned.default: _false,
    aten.detach_.default: _detach_,
}
for _name in ("t_", "transpose_", "squeeze_", "unsqueeze_", "as_strided_", "swapdims_", "swapaxes_"):
    for _ov in getattr(aten, _name).overloads():
        SPECIAL[getattr(getattr(aten, _name), _ov)] = _unsupported_metadata_mutation

VIEW = view_op
__all__ = ["SPECIAL", "VIEW", "wrap"]
