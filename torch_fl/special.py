"""Ops the router never sees: views, transfers, scalars and a few metadata-only ops."""

from __future__ import annotations

import torch

from . import transfer
from .errors import UnsupportedError
from .restride import resize, restride
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


def _new_factory(fill):
    def handler(func, args, kwargs):
        src, size = args[0], args[1]
        dtype = kwargs.get("dtype") or src.dtype
        target = _device_index(kwargs.get("device"), src._dev)
        if target is None:
            return func(torch.empty(0, dtype=src.dtype), *args[1:], **kwargs)
        out = transfer.empty_on(target, size, dtype)
        if fill is not None:
            fill(out, args)
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


def _inplace_view(func, args, kwargs):
    """t_, squeeze_, unsqueeze_, transpose_, ...: compute the out-of-place view's geometry,
    then give it to the tensor itself."""
    t = args[0]
    v = view_op(_out_of_place(func), args, kwargs)
    return restride(t, t._buf, v.shape, v.stride(), v.storage_offset())


def _out_of_place(func):
    """The functional view overload with the same arguments as an in-place view op."""
    packet = getattr(aten, func._schema.name.split("::")[1].rstrip("_"))
    if func._overloadname in packet.overloads():
        return getattr(packet, func._overloadname)
    names = [a.name for a in func._schema.arguments]
    for ov in packet.overloads():
        cand = getattr(packet, ov)
        if [a.name for a in cand._schema.arguments] == names:
            return cand
    raise UnsupportedError(f"RAL_ERROR_UNSUPPORTED: no functional form of {func}", op=str(func))


def _as_strided_(func, args, kwargs):
    t, size, stride = args[0], args[1], args[2]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    return restride(t, t._buf, size, stride, t.storage_offset() if offset is None else offset)


def _resize_(func, args, kwargs):
    return resize(args[0], args[1])


def _set_source_tensor(func, args, kwargs):
    t, src = args[0], args[1]
    if type(src) is not RalTensor or src._dev != t._dev:
        raise UnsupportedError(f"RAL_ERROR_UNSUPPORTED: set_ needs a source tensor on {t.device}", op=str(func))
    return restride(t, src._buf, src.shape, src.stride(), src.storage_offset())


def _set_empty(func, args, kwargs):
    t = args[0]
    return restride(t, transfer.empty_on(t._dev, (0,), t.dtype)._buf, (0,), (1,), 0)


def _detach_(func, args, kwargs):
    return args[0]


SPECIAL: dict = {
    aten.detach.default: alias,
    aten.alias.default: alias,
    aten.as_strided.default: as_strided,
    # Not alias-annotated in its schema, but a view by contract (input is never used again).
    aten._unsafe_view.default: view_op,
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy_,
    aten._local_scalar_dense.default: _local_scalar_dense,
    aten.lift_fresh.default: _lift_fresh,
    aten.empty_like.default: _like_factory(None),
    aten.zeros_like.default: _like_factory(lambda out, a, k: aten.zero_.default(out)),
    aten.ones_like.default: _like_factory(lambda out, a, k: aten.fill_.Scalar(out, 1)),
    aten.full_like.default: _like_factory(lambda out, a, k: aten.fill_.Scalar(out, a[1])),
    aten.new_empty.default: _new_factory(None),
    aten.new_zeros.default: _new_factory(lambda out, a: aten.zero_.default(out)),
    aten.new_ones.default: _new_factory(lambda out, a: aten.fill_.Scalar(out, 1)),
    aten.new_full.default: _new_factory(lambda out, a: aten.fill_.Scalar(out, a[2])),
    aten._fused_sdp_choice.default: _sdp_choice,
    aten.record_stream.default: _noop,
    aten.is_pinned.default: _false,
    aten.detach_.default: _detach_,
}
# Lazy conjugate/negative views are bits on a TensorImpl that a wrapper cannot carry into a
# kernel call: materialize them instead (the results compare equal, aliasing is lost).
SPECIAL[aten._conj.default] = lambda func, args, kwargs: aten.conj_physical.default(args[0])
SPECIAL[aten._neg_view.default] = lambda func, args, kwargs: aten.neg.default(args[0])
SPECIAL[aten.as_strided_.default] = _as_strided_
SPECIAL[aten.resize_.default] = _resize_
SPECIAL[aten.set_.source_Tensor] = _set_source_tensor
SPECIAL[aten.set_.default] = _set_empty
for _name in ("t_", "transpose_", "squeeze_", "unsqueeze_", "swapdims_", "swapaxes_"):
    for _ov in getattr(aten, _name).overloads():
        SPECIAL[getattr(getattr(aten, _name), _ov)] = _inplace_view

VIEW = view_op
__all__ = ["SPECIAL", "VIEW", "wrap"]
