"""Ops the router never sees: views, transfers, scalars and a few metadata-only ops.

`SPECIAL` is the one table of them; `@special(op, ...)` registers a handler and refuses an op
that already has one.
"""

from __future__ import annotations

import torch

from torch_fl.core.errors import UnsupportedError
from torch_fl.device import guard
from torch_fl.device.index import parse_device
from torch_fl.device.memory import record_stream
from torch_fl.dispatch.overlap import check_copy, copies_onto_itself
from torch_fl.dispatch.sdpa_entry import sdpa
from torch_fl.tensor import host_copy, transfer
from torch_fl.tensor.factories import cannot_pin, empty_memory_format, refuse_pinned
from torch_fl.tensor.layout import contiguous_strides, strides_like
from torch_fl.tensor.plain_ral import as_ral, is_plain_ral
from torch_fl.tensor.ral_tensor import RalTensor, tensor_sig
from torch_fl.tensor.restride import resize, restride
from torch_fl.tensor.staged_storage import is_host_bytes, is_ral_storage, set_from_host_storage, set_from_ral_storage
from torch_fl.tensor.views import alias, as_strided, check_as_strided, view_op
from torch_fl.tiers.attention import call_aten as sdpa_call_aten
from torch_fl.tiers.attention import fused_choice, sdpa_backward, sdpa_forward
from torch_fl.tiers.vendor import meta_run

_get_metadata = torch._C._get_tensor_metadata
_set_metadata = torch._C._set_tensor_metadata

aten = torch.ops.aten

# aten overload -> handler(func, args, kwargs).
SPECIAL: dict = {}
# Called after each registration (the entry point caches handler lookups).
ON_REGISTER: list = []
# What a handler returns to send the call on to the router after all.
ROUTE = object()


def special(*ops):
    """Decorator: make fn the handler of each op in `ops` (an op has at most one handler)."""

    def register(fn):
        for op in ops:
            if op in SPECIAL:
                raise RuntimeError(f"torch_fl: {op} already has a special handler ({SPECIAL[op].__name__})")
            SPECIAL[op] = fn
        for cb in ON_REGISTER:
            cb()
        return fn

    return register


@special(aten._to_copy.default)
def _to_copy(func, args, kwargs):
    src = args[0]
    dtype = kwargs.get("dtype") or src.dtype
    src_dev = src._dev if type(src) is RalTensor else None
    target = parse_device(kwargs.get("device"), src_dev if src_dev is not None else 0)
    if target is None:  # to CPU
        out = host_copy.to_cpu(src)  # in src's layout where dense
        mf = kwargs.get("memory_format")
        if out.dtype == dtype and mf in (None, torch.preserve_format):
            return out
        return out.to(dtype, memory_format=mf or torch.preserve_format)
    if src_dev is None:  # a CPU tensor (0-dim scalar or a mode upload)
        return transfer.to_device(src, target, dtype)
    strides = strides_like(src, kwargs.get("memory_format"), aten._to_copy.default)
    out = transfer.empty_on(target, src.shape, dtype, strides)
    return transfer.copy_into(out, src) if target != src_dev else aten.copy_.default(out, src)


@special(aten.copy_.default)
def _copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if is_plain_ral(src):  # torch.from_dlpack's result (tensor/plain_ral.py): rerun on its RalTensor
        return func(dst, as_ral(src), *args[2:], **kwargs)
    if copies_onto_itself(dst, src):
        return dst
    check_copy(dst, src)
    done = transfer.copy_into(dst, src)
    return ROUTE if done is None else done


@special(aten._local_scalar_dense.default)
def _local_scalar_dense(func, args, kwargs):
    return host_copy.item(args[0])


@special(aten.lift_fresh.default)
def _lift_fresh(func, args, kwargs):
    return args[0]


def _like_factory(fill):
    def handler(func, args, kwargs):
        src = args[0]
        dtype = kwargs.get("dtype") or src.dtype
        target = parse_device(kwargs.get("device"), src._dev)
        strides = strides_like(src, kwargs.get("memory_format"))
        if target is None:
            like = torch.empty_strided(src.shape, strides or src.stride(), dtype=src.dtype)
            return func(like, *args[1:], **kwargs)
        refuse_pinned(kwargs.get("pin_memory"), target)
        out = transfer.empty_on(target, src.shape, dtype, strides)
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
        target = parse_device(kwargs.get("device"), src._dev)
        if target is None:
            return func(torch.empty(0, dtype=src.dtype), *args[1:], **kwargs)
        refuse_pinned(kwargs.get("pin_memory"), target)
        out = transfer.empty_on(target, size, dtype)
        if fill is not None:
            fill(out, args)
        if kwargs.get("requires_grad"):
            out.requires_grad_(True)
        return out

    return handler


@special(aten._fused_sdp_choice.default)
def _sdp_choice(func, args, kwargs):
    # OVERRIDEABLE sends SDPA whole to tiers/attention.py (one fused kernel where the
    # vendor has one); calls it does not fit (dropout, grouped heads, ...) take the math path.
    sch = func._schema.arguments
    a = {s.name: (args[i] if i < len(args) else kwargs.get(s.name, s.default_value)) for i, s in enumerate(sch)}
    ok = fused_choice(a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"], a["is_causal"], a["enable_gqa"])
    return int(torch.nn.attention.SDPBackend.OVERRIDEABLE if ok else torch.nn.attention.SDPBackend.MATH)


@special(aten.scaled_dot_product_attention.default)
def _sdpa(func, args, kwargs):
    # Reached only without autograd keys (inference_mode); else sdpa_entry's kernel runs first.
    return sdpa(*args, **kwargs)


_EMPTY = aten.empty.memory_format
_dispatch_modes = torch._C._len_torch_dispatch_stack
_profiling = torch._C._autograd._profiler_enabled


def _direct(op, *args, **kwargs):
    """op run as the dispatcher would from inside RalTensor's handler, minus its trip: this
    handler is already below autograd and autocast, and the caller checked that no dispatch
    mode or profiler would see the op (the op observers still do, in the router)."""
    if op is _EMPTY:
        return empty_memory_format(*args, **kwargs)
    return RalTensor.__torch_dispatch__(op, (), args, kwargs)


@special(aten._scaled_dot_product_fused_attention_overrideable.default)
def _sdpa_overrideable(func, args, kwargs):
    # Glue around one routed kernel op (the fused forward) with no compute of its own, like
    # a view: served here so that coverage shows the kernel op's tier, not a decomposition.
    # A decoded token makes one such call per layer: its inner ops skip the dispatcher when
    # nothing could see them there (~30 us of a ~75 us call).
    call = _direct if not (_dispatch_modes() or _profiling()) else sdpa_call_aten
    return _strided_as_meta(func, args, kwargs, sdpa_forward(*args, **kwargs, call=call))


@special(aten._scaled_dot_product_fused_attention_overrideable_backward.default)
def _sdpa_overrideable_backward(func, args, kwargs):
    # Recomputes through routed aten ops (bmm, exp, ...); CPU has no kernel for this op.
    return _strided_as_meta(func, args, kwargs, sdpa_backward(*args, **kwargs))


# (op, argument geometry) -> the strides PyTorch's meta kernel gives each result.
_META_STRIDES: dict = {}


def _geometry(x):
    if type(x) is RalTensor:
        return x._sig or tensor_sig(x)  # cached on the tensor: (device, shape, dtype, strides or True)
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.stride(), x.dtype)
    return tuple(x) if isinstance(x, list) else x


def _strided_as_meta(func, args, kwargs, results):
    """results, each copied to the strides PyTorch's meta kernel for func promises where they
    differ: a compiled graph (whose fake tensors ran that meta kernel) views them by those."""
    key = (func, tuple(map(_geometry, args)), tuple((k, _geometry(v)) for k, v in kwargs.items()) if kwargs else ())
    strides = _META_STRIDES.get(key)
    if strides is None:
        meta = meta_run(func, args, kwargs)
        strides = _META_STRIDES[key] = [m.stride() if isinstance(m, torch.Tensor) else None for m in meta]
    out = list(results)
    for i, (r, want) in enumerate(zip(results, strides)):
        if isinstance(r, RalTensor) and want is not None and r.stride() != want and r.numel() > 1:
            fixed = aten.empty_strided.default(r.shape, want, dtype=r.dtype, device=r.device)
            out[i] = aten.copy_.default(fixed, r)
    return tuple(out)


@special(aten.record_stream.default)
def _record_stream(func, args, kwargs):
    """Tensor.record_stream(s): the tensor's memory, once freed, waits for s's queued work
    before any stream reuses it (the pool remembers s on the block)."""
    t, stream = args
    if stream.device != t.device:
        raise RuntimeError(f"record_stream: the stream is on {stream.device}, the tensor on {t.device}")
    buf = t._buf
    if buf.ptr:  # a storage resized to 0 bytes holds no block
        record_stream(buf, stream.stream_id)
    return None


@special(aten.is_pinned.default)
def _false(func, args, kwargs):
    return False


@special(aten.pin_memory.default, aten._pin_memory.default)
def _pin_memory(func, args, kwargs):
    # CUDA refuses to pin a device tensor; returning it unpinned hid that from the caller
    raise cannot_pin(args[0])


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


@special(aten.as_strided_.default)
def _as_strided_(func, args, kwargs):
    t, size, stride = args[0], args[1], args[2]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    offset = t.storage_offset() if offset is None else offset
    check_as_strided(t, tuple(size), tuple(stride), offset)  # as the out-of-place form, before t changes
    return restride(t, t._buf, size, stride, offset)


@special(aten.resize_.default)
def _resize_(func, args, kwargs):
    return resize(args[0], args[1], kwargs.get("memory_format"))


@special(aten.set_.source_Tensor)
def _set_source_tensor(func, args, kwargs):
    t, src = args[0], args[1]
    # a conjugate/negative view (RalMathView) is a source too: t takes its memory and geometry
    # without the bit, as on CPU (`t.set_(x.conj())` leaves t.is_conj() False)
    if type(t) is not RalTensor or not isinstance(src, RalTensor) or src._dev != t._dev:
        raise UnsupportedError(f"RAL_ERROR_UNSUPPORTED: set_ needs a source tensor on {t.device}", op=str(func))
    return restride(t, src._buf, src.shape, src.stride(), src.storage_offset())


@special(aten.set_.source_Storage_storage_offset)
def _set_source_storage(func, args, kwargs):
    # torch.load's _rebuild_tensor: a ral tensor set_ to a checkpoint's host bytes
    t, storage, offset, size = args[:4]
    stride = args[4] if len(args) > 4 else kwargs.get("stride", ())
    if type(t) is RalTensor and is_host_bytes(storage):
        stride = list(stride) or list(contiguous_strides(size))
        return set_from_host_storage(t, storage, offset, size, stride)
    if type(t) is RalTensor and is_ral_storage(storage):  # PyTorch's storage copies, among others
        return set_from_ral_storage(t, storage, offset, size, list(stride) or list(contiguous_strides(size)))
    return ROUTE


@special(aten.set_.source_Storage)
def _set_whole_storage(func, args, kwargs):
    # t.set_(storage) below the Python method: PyTorch's storage copies and fills
    t, storage = args[0], args[1]
    if type(t) is RalTensor and is_ral_storage(storage):
        n = storage.nbytes() // t.dtype.itemsize
        return set_from_ral_storage(t, storage, 0, [n], [1])
    if type(t) is RalTensor and is_host_bytes(storage):  # staged: uploaded; plain CPU: refused
        return set_from_host_storage(t, storage, 0, [storage.nbytes() // t.dtype.itemsize], [1])
    return ROUTE


@special(aten.set_.default)
def _set_empty(func, args, kwargs):
    t = args[0]
    return restride(t, transfer.empty_on(t._dev, (0,), t.dtype)._buf, (0,), (1,), 0)


@special(aten.detach_.default)
def _detach_(func, args, kwargs):
    return args[0]


# Pure views run no kernel: a new wrapper over the same buffer.
special(aten.alias.default)(alias)


@special(aten.detach.default)
def _detach(func, args, kwargs):
    # PyTorch's detach is a shallow copy of the TensorImpl, which keeps the backend metadata
    # (torch._utils.set_tensor_metadata); nn.Parameter(t) and deepcopy go through it
    out = alias(func, args, kwargs)
    if guard.BACKEND_META_USED.value:  # skip the lookup until some tensor has metadata
        meta = _get_metadata(args[0])
        if meta:
            _set_metadata(out, meta)
    return out


# ATen's advanced indexing takes index tensors on the CPU for a tensor on any device
# ("indices should be either on cpu or on the same device as the indexed tensor"), so
# x[cpu_mask] = 0 on a ral tensor works as on CUDA: upload them, then route as usual.
_INDEX_OPS = (
    aten.index.Tensor,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
    aten._unsafe_index.Tensor,
    aten._unsafe_index_put.default,
)


def _is_cpu_index(i) -> bool:
    return isinstance(i, torch.Tensor) and type(i) is not RalTensor and i.device.type == "cpu"


@special(*_INDEX_OPS)
def _index_with_cpu_indices(func, args, kwargs):
    self = args[0]
    indices = args[1] if len(args) > 1 else kwargs.get("indices")
    if type(self) is not RalTensor or not indices or not any(_is_cpu_index(i) for i in indices):
        return ROUTE
    moved = [transfer.to_device(i, self._dev) if _is_cpu_index(i) else i for i in indices]
    if len(args) > 1:
        return func(self, moved, *args[2:], **kwargs)
    return func(self, **{**kwargs, "indices": moved})


# A NaN scalar bound makes clamp's result NaN on CPU; the vendor kernels compare against it
# and keep x. The router keys Scalars by type, so the call goes on as the Tensor overload,
# whose 0-dim bound the tiers treat as a value (default dtype: a Python float's promotion).
_CLAMP_TENSOR_OVERLOAD = {
    aten.clamp.default: aten.clamp.Tensor,
    aten.clamp_.default: aten.clamp_.Tensor,
    aten.clamp.out: aten.clamp.Tensor_out,
    aten.clamp_min.default: aten.clamp_min.Tensor,
    aten.clamp_min_.default: aten.clamp_min_.Tensor,
    aten.clamp_min.out: aten.clamp_min.Tensor_out,
    aten.clamp_max.default: aten.clamp_max.Tensor,
    aten.clamp_max_.default: aten.clamp_max_.Tensor,
    aten.clamp_max.out: aten.clamp_max.Tensor_out,
}


def _is_nan(v) -> bool:
    return type(v) is float and v != v


@special(*_CLAMP_TENSOR_OVERLOAD)
def _clamp_nan_bound(func, args, kwargs):
    bounds = list(args[1:])
    if not any(map(_is_nan, (*bounds, *kwargs.values()))):
        return ROUTE
    written = args[0] if func._schema.name.endswith("_") else kwargs.get("out")
    if written is not None and not (written.dtype.is_floating_point or written.dtype.is_complex):
        return ROUTE  # a float result written to an integer tensor: the tiers raise CPU's cast error
    dtype = torch.get_default_dtype()

    def as_tensor(v):
        return torch.tensor(v, dtype=dtype) if isinstance(v, (int, float)) and type(v) is not bool else v

    new_kwargs = {k: (as_tensor(v) if k in ("min", "max") else v) for k, v in kwargs.items()}
    return _CLAMP_TENSOR_OVERLOAD[func](args[0], *map(as_tensor, bounds), **new_kwargs)


@special(aten.any.dims, aten.all.dims)
def _reduce_over_no_dims(func, args, kwargs):
    # any/all with an empty dim list reduce nothing (x != 0, uint8 kept as uint8), where an
    # empty list means every dim to sum and to the kernels' shared dim parsing: the OpenCL
    # plugin wrote any(x) into the first element of an otherwise unwritten result.
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if dim is None or len(dim) != 0:
        return ROUTE
    x = args[0]
    out = aten.ne.Scalar(x, 0)
    return out if x.dtype is not torch.uint8 else aten._to_copy.default(out, dtype=torch.uint8)


_reduce_over_no_dims.routes_by_signature = True  # the dim list is in the fast key


def _huber_into_input_dtype(func, args, kwargs):
    # ATen huber_loss computes in the operands' common dtype into a tensor of the input's dtype,
    # then reduces that: huber(float16, float32) is float16 on CPU and CUDA, where the meta
    # function (which the router plans from) answers float32. Other calls route as usual.
    x, target = args[0], args[1]
    if not isinstance(target, torch.Tensor) or target.dtype == x.dtype:
        return ROUTE
    reduction = args[2] if len(args) > 2 else kwargs.get("reduction", 1)
    delta = args[3] if len(args) > 3 else kwargs.get("delta", 1.0)
    common = torch.promote_types(x.dtype, target.dtype)
    if common == x.dtype or not torch.can_cast(common, x.dtype):
        return ROUTE  # the common dtype is x's, or the call is refused (dtype_checks.py)
    loss = aten.huber_loss.default(aten._to_copy.default(x, dtype=common), target, 0, delta)
    loss = aten._to_copy.default(loss, dtype=x.dtype)
    if reduction == 1:  # Reduction::Mean
        return aten.mean.default(loss)
    return aten.sum.default(loss) if reduction == 2 else loss


special(aten.huber_loss.default)(_huber_into_input_dtype)
special(aten.as_strided.default)(as_strided)
# Not alias-annotated in its schema, but a view by contract (input is never used again).
special(aten._unsafe_view.default)(view_op)
special(aten.empty_like.default)(_like_factory(None))
special(aten.zeros_like.default)(_like_factory(lambda out, a, k: aten.zero_.default(out)))
special(aten.ones_like.default)(_like_factory(lambda out, a, k: aten.fill_.Scalar(out, 1)))
special(aten.full_like.default)(_like_factory(lambda out, a, k: aten.fill_.Scalar(out, a[1])))
special(aten.new_empty.default)(_new_factory(None))
special(aten.new_zeros.default)(_new_factory(lambda out, a: aten.zero_.default(out)))
special(aten.new_ones.default)(_new_factory(lambda out, a: aten.fill_.Scalar(out, 1)))
special(aten.new_full.default)(_new_factory(lambda out, a: aten.fill_.Scalar(out, a[2])))
# prims' view ops (torch._refs reach them) carry meta functions that describe a fresh tensor,
# not the view: a view built from them read prims.real/imag of complex64 as float32 with the
# complex tensor's strides, and prims.conj lost its conjugation, silently. Their ATen forms.
_prims = torch.ops.prims
special(_prims.real.default)(lambda func, args, kwargs: aten.real.default(args[0]))
special(_prims.imag.default)(lambda func, args, kwargs: aten.imag.default(args[0]))
special(_prims.conj.default)(lambda func, args, kwargs: aten.conj_physical.default(args[0]))
special(_prims.as_strided.default)(lambda func, args, kwargs: aten.as_strided.default(*args, **kwargs))
# prims.copy_to writes b into a, across devices as copy_ does (torch._refs.to(ral, "cpu")).
special(_prims.copy_to.default)(lambda func, args, kwargs: aten.copy_.default(args[0], args[1]))


@special(aten.copy.default)
def _copy_across_devices(func, args, kwargs):
    """The functional copy (torch._refs.linspace of a tensor start, functionalized graphs) of
    src into self on another device: a copy of self with src's values, as copy_ allows."""
    dst, src = args[0], args[1]
    if isinstance(src, torch.Tensor) and dst.device != src.device:
        return aten.copy_.default(aten.clone.default(dst), src, *args[2:], **kwargs)
    return ROUTE


_copy_across_devices.routes_by_signature = True  # both operands' devices are in the fast key
special(
    *(
        getattr(getattr(aten, name), ov)
        for name in ("t_", "transpose_", "squeeze_", "unsqueeze_", "swapdims_", "swapaxes_")
        for ov in getattr(aten, name).overloads()
    )
)(_inplace_view)
