"""ral_mode(device): run unmodified CPU code on a ral device.

A TorchFunctionMode (above autograd, so uploads are differentiable):
  - factories that name no device land on the device;
  - CPU tensors that meet a computing op are uploaded once, cached until their version
    counter (or data pointer) changes or they die; tensors that require grad go through a
    differentiable upload whose backward brings the gradient back to CPU;
  - ops that mutate a CPU tensor (optimizer steps, `x += y` on a CPU tensor) run on CPU,
    downloading any device operands, so CPU state stays where the user put it.
Under torch.compile Dynamo traces the mode: the same rules then go into the graph as ops
(`.to()` for the moves; see ral_mode._traced), since the runtime's native calls are not traceable.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from functools import partial

import torch
import torch.utils.checkpoint as _checkpoint
from torch.nn.parameter import is_lazy
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

from torch_fl.device import dynamo_interface, fork, rng
from torch_fl.device.amp import cpu_autocast_needs_mirror as _cpu_amp_needs_mirror
from torch_fl.device.amp import mirror_cpu_autocast as _mirror_cpu_amp
from torch_fl.device.index import parse_device
from torch_fl.dispatch import shortcuts
from torch_fl.dispatch.shortcuts import SHORTCUTS
from torch_fl.tensor.grad_home import differentiable_upload
from torch_fl.tensor.host_copy import to_cpu
from torch_fl.tensor.import_hooks import when_imported
from torch_fl.tensor.ral_tensor import RalMathView, RalTensor, first_trace, host_values
from torch_fl.tensor.transfer import to_device

_PASSTHROUGH_NAMES = {
    "size",
    "dim",
    "numel",
    "stride",
    "storage_offset",
    "is_contiguous",
    "element_size",
    "nelement",
    "ndimension",
    "data_ptr",
    "cpu",
    "tolist",
    "item",
    "to",
    "_to_copy.default",  # aten's `to`: a compiled graph's uploads, already on their device
    "type",
    "type_as",
    "__repr__",
    "__format__",
    "__str__",
    "__len__",
    "__reduce_ex__",
    "__deepcopy__",
    "requires_grad_",
    "register_hook",
    "register_post_accumulate_grad_hook",
    "retain_grad",
    "backward",
    "detach",
    "detach_",
    "untyped_storage",
    "storage",
    "is_floating_point",
    "is_complex",
    "get_device",
    "__hash__",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "dim_order",
    "is_shared",
    "share_memory_",
    "is_pinned",
    "__setstate__",
    "_is_view",
    "_base",
    "has_names",
    "is_nonzero",
}
_FACTORIES = {
    torch.empty,
    torch.zeros,
    torch.ones,
    torch.full,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.arange,
    torch.linspace,
    torch.logspace,
    torch.eye,
    torch.tensor,
    torch.as_tensor,
    torch.scalar_tensor,
    torch.empty_strided,
    torch.range,
}
# Random number producers. Under ral_mode(rng="cpu") (the default) they draw from PyTorch's
# CPU generator and upload the result, so an unmodified script gives CPU's numbers exactly.
_RNG_INPLACE_NAMES = {
    "uniform_",
    "normal_",
    "bernoulli_",
    "random_",
    "exponential_",
    "geometric_",
    "log_normal_",
    "cauchy_",
}
_RNG_FUNCTIONS = {
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.rand_like,
    torch.randn_like,
    torch.randint_like,
    torch.normal,
    torch.bernoulli,
    torch.multinomial,
    torch.poisson,
}
# Ops whose result aliases their first argument. On a CPU tensor they stay on CPU (metadata
# only, no data moves), so a later in-place op through the view lands in the CPU tensor the
# user owns, exactly as without the mode (`t[1:].zero_()`, `w.diagonal().fill_(7)`).
_VIEW_NAMES = {
    "__getitem__",
    "view",
    "view_as",
    "reshape",
    "reshape_as",
    "flatten",
    "unflatten",
    "diagonal",
    "select",
    "narrow",
    "transpose",
    "swapaxes",
    "swapdims",
    "t",
    "permute",
    "movedim",
    "moveaxis",
    "squeeze",
    "unsqueeze",
    "expand",
    "expand_as",
    "as_strided",
    "unfold",
    "unbind",
    "split",
    "split_with_sizes",
    "tensor_split",
    "chunk",
    "hsplit",
    "vsplit",
    "dsplit",
    "adjoint",
    "real",
    "imag",
    "view_as_real",
    "view_as_complex",
    "conj",
    "contiguous",
}
_PASS, _FACTORY, _INPLACE, _COMPUTE, _VIEW, _INIT, _SWAP, _RNG_INPLACE, _RNG, _DROPOUT = range(10)
_NUMPY = -1  # hands a CPU tensor's memory to numpy (whose writes bump no version counter)
# DLPack hands it to any library (np/torch.from_dlpack): as numpy, and never uploaded
_NUMPY_NAMES = {"numpy", "__array__", "__dlpack__", "__dlpack_device__"}
_SET_DATA = -2  # `cpu_tensor.data = value`: the value a computation made on the device comes home
# Ops whose results ral devices cannot hold (quantized dtypes, sparse layouts): CPU PyTorch
# with any device operand downloaded, the result CPU state as without the mode.
_HOST_ONLY = -3
_HOST_ONLY_NAMES = {
    "quantize_per_tensor",
    "quantize_per_tensor_dynamic",
    "quantize_per_channel",
    "to_sparse",
    "to_sparse_coo",
    "to_sparse_csr",
    "to_sparse_csc",
    "to_sparse_bsr",
    "to_sparse_bsc",
}
# `t.pin_memory()`: a CPU tensor is pinned; a program's host tensor the mode made on the device
# is returned as it is (pinned memory only speeds up a later copy to the device), where the
# same call outside the mode raises as on CUDA.
_PIN = -4
# `out.backward(g)`, `torch.autograd.grad(outs, xs, gs)`, `torch.autograd.backward(outs, gs)`:
# a CPU gradient given for an output the mode made on the device is uploaded beside it, as a
# CPU operand of an op is (autograd would hand it to the device op's backward as it is)
_BACKWARD = -5
_DATA_DESCRIPTOR = torch._C.TensorBase.__dict__["data"]
_KINDS: dict = {}

# Upload cache: id(cpu tensor) -> (weak ref to it, version, data_ptr, device, device copy,
# storage data_ptr). Looked up on every operand of every op: a plain id-keyed dict with an
# identity check on the weak ref costs a fraction of WeakIdKeyDictionary's lookup (which
# builds a key object per call). The ref's callback drops the entry when the CPU tensor
# dies, so the cache keeps no CPU tensor alive and a reused id never finds a stale entry.
#
# When an entry is current (docs/tensors_and_serialization.md, "Freshness under ral_mode"):
#   - a write through the tensor itself, or any view or detach() of it, in any thread, bumps
#     the version counter they share (checked per hit), and set_ / `.data =` change its
#     data pointer (checked per hit);
#   - a write through an alias with its own version counter (`p.data`, another tensor made
#     on the same storage) made under the mode is an in-place CPU op the mode runs: it drops
#     every entry on that storage (_BY_STORAGE, no per-hit cost);
#   - memory torch does not own (torch.from_numpy, torch.frombuffer: storages that are not
#     resizable) and storages handed to numpy under the mode are never cached;
#   - entering and leaving a ral_mode empties the cache, so anything done between two blocks
#     (a `.data` update outside the mode, numpy writes) is seen by the next block, and no
#     twin or weak reference outlives its block.
_CACHE: dict = {}
_BY_STORAGE: dict = {}  # storage data_ptr -> set of _CACHE keys on it
# Storages handed to numpy under the mode, or copied into a device tensor by `copy_` (how
# inductor's generated code on ral:0 reads a CPU graph input, whose update it then writes back
# from a C++ kernel that bumps no version counter): not cached while a tensor that exposed them
# lives (a numpy array keeps its tensor alive). Storage data_ptr -> {id(tensor): weak ref}; a
# dead tensor's entry goes, so a later storage at the same address caches again.
_EXPOSED: dict = {}
# Running statistics (batch/instance norm in training) updated on their device twins whose copy
# home is deferred: id(cpu tensor) -> (cpu tensor, twin). Copying home at once costs a stream
# sync per norm layer, which stalls the forward behind every queued kernel; device ops read the
# cached twin (current), and the copy lands when CPU code next reads that storage through the
# mode (a pass-through call, an op run on CPU, an upload of an alias), at an optimizer step, or
# when the block ends.
_PENDING: dict = {}
_PENDING_BY_STORAGE: dict = {}  # storage data_ptr -> set of _PENDING keys on it
stats = {"uploads": 0, "cache_hits": 0}


def _unindex(key: int, sptr: int) -> None:
    keys = _BY_STORAGE.get(sptr)
    if keys is not None:
        keys.discard(key)
        if not keys:
            _BY_STORAGE.pop(sptr, None)


def _evict(key: int, ref) -> None:
    # Runs while the CPU tensor is being freed: its id cannot have been reused yet.
    e = _CACHE.get(key)
    if e is not None and e[0] is ref:
        _CACHE.pop(key, None)
        _unindex(key, e[5])


def _cache_get(t):
    """The cache entry of CPU tensor t, or None."""
    e = _CACHE.get(id(t))
    if e is not None and e[0]() is t:
        return e
    return None


def _storage_ptr(t) -> int:
    return t.untyped_storage().data_ptr()


def _cacheable(t) -> bool:
    """Whether torch sees every write to t's memory: not memory it borrowed (from_numpy,
    frombuffer make storages that cannot resize) nor a storage handed to numpy here."""
    s = t.untyped_storage()
    return s.resizable() and s.data_ptr() not in _EXPOSED


def _cache_put(t, version: int, ptr: int, dev: int, copy, sptr: int) -> None:
    key = id(t)
    e = _CACHE.get(key)
    if e is not None and e[0]() is t:
        ref = e[0]
        if e[5] != sptr:
            _unindex(key, e[5])
    else:
        ref = weakref.ref(t, partial(_evict, key))
    _CACHE[key] = (ref, version, ptr, dev, copy, sptr)
    _BY_STORAGE.setdefault(sptr, set()).add(key)


def _cache_drop(t) -> None:
    e = _cache_get(t)
    if e is not None:
        _CACHE.pop(id(t), None)
        _unindex(id(t), e[5])


def _invalidate_storage(t) -> None:
    """Drop the twin of every cached CPU tensor on t's storage: t was written through an
    alias whose version counter the others do not share (`p.data.add_(...)`)."""
    if is_lazy(t):
        return  # an UninitializedParameter has no storage yet, so nothing can be cached on it
    for key in _BY_STORAGE.pop(_storage_ptr(t), ()):
        _CACHE.pop(key, None)


def _unexpose(sptr: int, key: int, ref) -> None:
    refs = _EXPOSED.get(sptr)
    if refs is not None and refs.get(key) is ref:
        del refs[key]
        if not refs:
            _EXPOSED.pop(sptr, None)


def _expose(t) -> None:
    """t's memory was handed to code whose writes bump no version counter (numpy, a compiled
    graph): t's storage is not cached again while t lives."""
    if _is_cpu_tensor(t) and t.layout is torch.strided:
        _invalidate_storage(t)
        sptr, key = _storage_ptr(t), id(t)
        refs = _EXPOSED.setdefault(sptr, {})
        old = refs.get(key)
        if old is None or old() is not t:
            refs[key] = weakref.ref(t, lambda ref, sptr=sptr, key=key: _unexpose(sptr, key, ref))


def flush_upload_cache() -> None:
    """Copy deferred running statistics home, then forget every cached device twin (each CPU
    tensor is uploaded afresh at its next use)."""
    try:
        _settle_all()
    finally:  # a failed copy home (a kernel error reported at the sync) still empties the cache
        _PENDING.clear()
        _PENDING_BY_STORAGE.clear()
        _CACHE.clear()
        _BY_STORAGE.clear()


# Namespaces of ops whose tensor arguments are opaque handles, not data: the old profiler
# API's `_record_function_enter` returns a CPU tensor that wraps a C++ RecordFunction, which
# `_record_function_exit` unwraps. Uploading it would hand the op a tensor it cannot read.
_HANDLE_NAMESPACES = ("profiler::",)


def _opaque_handle_op(func) -> bool:
    name = getattr(func, "_qualified_op_name", None)  # an OpOverloadPacket
    if name is None:
        packet = getattr(func, "overloadpacket", None)  # an OpOverload
        name = getattr(packet, "_qualified_op_name", "")
    return name.startswith(_HANDLE_NAMESPACES)


def _pin(func, args, kwargs):
    """`t.pin_memory()` in the mode (see _PIN)."""
    if args and isinstance(args[0], RalTensor):
        return args[0]
    return func(*args, **kwargs)


def _placed(kwargs: dict, device) -> dict:
    """A factory's kwargs with the mode's device: the program's host tensor is made there, so
    its pin_memory request (host memory for copies to a device) has nothing left to pin."""
    out = dict(kwargs, device=device)
    out.pop("pin_memory", None)
    return out


def _factory_call(func, args, kwargs: dict, device):
    """A factory called inside the mode: made on the mode's device unless the call names a
    device or an out= tensor, which decides it as without the mode (`arange(n, out=cpu_buf)`)."""
    if kwargs.get("device") is None and kwargs.get("out") is None:
        kwargs = _placed(kwargs, device)
    return func(*args, **kwargs)


def _kind(func) -> int:
    k = _KINDS.get(func)
    if k is None:
        name = getattr(func, "__name__", "")
        if func in _RNG_FUNCTIONS:
            k = _RNG
        elif name in _RNG_INPLACE_NAMES and func is getattr(torch.Tensor, name, None):
            k = _RNG_INPLACE
        elif getattr(func, "__module__", "") == "torch.nn.init":
            k = _INIT
        elif func is torch.nn.functional.dropout:
            k = _DROPOUT
        elif func in _FACTORIES:
            k = _FACTORY
        elif func is torch._has_compatible_shallow_copy_type:
            k = _SWAP
        elif name in _NUMPY_NAMES:
            k = _NUMPY
        elif name in _HOST_ONLY_NAMES:
            k = _HOST_ONLY
        elif name == "pin_memory":
            k = _PIN
        elif name == "__set__" and getattr(func, "__self__", None) is _DATA_DESCRIPTOR:
            k = _SET_DATA
        elif func is torch.Tensor.backward or func is torch.autograd.grad or func is torch.autograd.backward:
            k = _BACKWARD  # its inputs are graph nodes to differentiate for, not data to upload
        elif name in _PASSTHROUGH_NAMES or name in ("__get__", "__set__") or _opaque_handle_op(func):
            k = _PASS
        elif name in _VIEW_NAMES:
            k = _VIEW
        elif (
            (name.endswith("_") and not name.endswith("__"))
            or name in ("__setitem__",)
            or (name.startswith("__i") and name.endswith("__"))
        ):
            k = _INPLACE
        else:
            k = _COMPUTE
        _KINDS[func] = k
    return k


def _cached_copy(t: torch.Tensor, dev: int) -> RalTensor:
    try:
        version = t._version
    except RuntimeError:  # inference tensors carry no version counter: do not cache
        _settle_tensor(t)
        return to_device(t.detach(), dev)
    base = t._base
    if base is not None and _same_layout_base(t, base):
        # A view of a CPU tensor (made on CPU by the mode): a device view of the base's
        # cached twin, so `w[:, :n]` in every forward does not upload anew each call.
        twin = _cached_copy(base, dev)
        return twin.as_strided(t.shape, t.stride(), t.storage_offset())
    ptr = t.data_ptr()
    hit = _cache_get(t)
    if hit is not None and hit[1] == version and hit[2] == ptr and hit[3] == dev:
        stats["cache_hits"] += 1
        return hit[4]
    if _PENDING:
        _settle_tensor(t)  # an alias of running statistics whose new values wait on their twin
    copy = to_device(t.detach(), dev)
    stats["uploads"] += 1
    if _cacheable(t):
        _cache_put(t, version, ptr, dev, copy, _storage_ptr(t))
    return copy


def _twin_hit(a, dev: int):
    """The cached device twin of CPU tensor a when it is current and needs no differentiable
    upload, else _MISS."""
    # Only CPU strided tensors without a functorch wrapper ever get an entry, and the weak
    # ref's identity check rules out a reused id: a hit is one of them.
    e = _CACHE.get(id(a))
    if (
        e is None
        or e[0]() is not a
        or e[3] != dev
        or e[1] != a._version
        or e[2] != a.data_ptr()
        or (a.requires_grad and _grad_enabled())
    ):
        return _MISS
    return e[4]


def _cached_twin(a, dev: int, uploaded: list):
    """_twin_hit of tensor a, recorded in `uploaded` for the write-back check."""
    if type(a) is RalTensor:
        return a
    twin = _twin_hit(a, dev)
    if twin is not _MISS:
        uploaded.append((a, twin, _version_of(twin)))
    return twin


def _same_layout_base(t: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether base's device twin (a contiguous copy) has t's storage layout: t can be
    made from it by as_strided with t's own sizes, strides and offset."""
    return (
        base.dtype == t.dtype
        and base.storage_offset() == 0
        and base.is_contiguous()
        and not (t.is_conj() or t.is_neg() or base.is_conj() or base.is_neg())
        and t.untyped_storage().data_ptr() == base.data_ptr()
    )


def _version_of(t) -> int:
    try:
        return t._version
    except RuntimeError:  # inference tensors carry no version counter
        return -1


# Functions that update running statistics in place without an in-place op that
# autograd's version counter sees: func -> (running_mean, running_var positions and names),
# and the flag saying whether they update (position, name).
_RUNNING_STATS = {
    torch.nn.functional.batch_norm: (((1, "running_mean"), (2, "running_var")), (5, "training")),
    torch.nn.functional.instance_norm: (((1, "running_mean"), (2, "running_var")), (5, "use_input_stats")),
    torch.batch_norm: (((3, "running_mean"), (4, "running_var")), (5, "training")),
    torch.native_batch_norm: (((3, "running_mean"), (4, "running_var")), (5, "training")),
    torch._native_batch_norm_legit: (((3, "running_mean"), (4, "running_var")), (5, "training")),
    torch.instance_norm: (((3, "running_mean"), (4, "running_var")), (5, "use_input_stats")),
}


def _arg(args, kwargs, pos, name, default=None):
    """Argument `name` of a Python-level call, given by position or keyword."""
    return args[pos] if len(args) > pos else kwargs.get(name, default)


def _mutated_buffers(func, args, kwargs) -> list:
    """CPU tensors a function updates in place without an in-place op visible to autograd's
    version counter: batch and instance norm's running statistics in training."""
    spec = _RUNNING_STATS.get(func)
    if spec is None:
        return []
    stats, (flag_pos, flag_name) = spec
    # F.instance_norm defaults use_input_stats=True; the others have no default to miss
    if not _arg(args, kwargs, flag_pos, flag_name, func is torch.nn.functional.instance_norm):
        return []
    found = [_arg(args, kwargs, pos, name) for pos, name in stats]
    return [t for t in found if isinstance(t, torch.Tensor)]


def _write_back(t: torch.Tensor, twin: RalTensor) -> None:
    """An op mutated the device twin of a CPU tensor (batch_norm's running stats, an in-place
    op buried in a function): copy the new values home, and keep the twin cached as current."""
    with torch.no_grad():
        t.copy_(to_cpu(twin.detach()))
    hit = _cache_get(t)
    _invalidate_storage(t)  # aliases of t with their own version counters now differ
    if hit is not None:
        _cache_put(t, t._version, hit[2], hit[3], hit[4], hit[5])


def _defer_write_back(t: torch.Tensor, twin: RalTensor) -> None:
    """Running statistics an op updated on t's cached twin: copied home later (_PENDING)."""
    e = _cache_get(t)
    if e is None or e[4] is not twin or t._base is not None:
        _write_back(t, twin)  # no cached twin for later ops to read: copy home now
        return
    key, sptr = id(t), e[5]
    _PENDING[key] = (t, twin)
    _PENDING_BY_STORAGE.setdefault(sptr, set()).add(key)
    # Aliases of t with entries of their own (a detach(), `.data`) hold its old values: they
    # upload afresh, which settles t first.
    for other in tuple(_BY_STORAGE.get(sptr, ())):
        if other != key:
            _CACHE.pop(other, None)
            _unindex(other, sptr)


def _settle_storage(sptr: int) -> None:
    for key in _PENDING_BY_STORAGE.pop(sptr, ()):
        entry = _PENDING.pop(key, None)
        if entry is not None:
            _write_back(*entry)


def _settle_tensor(t) -> None:
    """Copy home the deferred running statistics on CPU tensor t's storage, if any."""
    if _PENDING_BY_STORAGE and type(t) is not RalTensor and t.layout is torch.strided and not is_lazy(t):
        if t.device.type == "cpu" and not _functorch_wrapped(t):
            sptr = _storage_ptr(t)
            if sptr in _PENDING_BY_STORAGE:
                _settle_storage(sptr)


def _settle(args, kwargs) -> None:
    """_settle_tensor for every tensor among args and kwargs (one level of lists): CPU code is
    about to read or write them."""
    for v in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(v, torch.Tensor):
            _settle_tensor(v)
        elif type(v) is list or type(v) is tuple:
            for x in v:
                if isinstance(x, torch.Tensor):
                    _settle_tensor(x)


def _settle_all() -> None:
    """Copy home every deferred update of running statistics (a block ends or begins)."""
    if not _PENDING:
        return
    with torch._C.DisableTorchFunction():  # may run while a mode is active (enter/exit)
        while _PENDING:  # one at a time: a failed copy leaves the rest pending
            _write_back(*_PENDING.popitem()[1])
    _PENDING_BY_STORAGE.clear()  # _settle_storage skips keys already settled meanwhile


def upload(t: torch.Tensor, dev: int) -> RalTensor:
    """The device twin of a CPU tensor: cached, and differentiable if t requires grad."""
    copy = _cached_copy(t, dev)
    if t.requires_grad and torch.is_grad_enabled():
        return differentiable_upload(t, copy)
    return copy


# Where each backward entry point takes (outputs, gradients): positions and keyword names.
_GRAD_SLOTS = {
    torch.Tensor.backward: ((0, "self"), (1, "gradient")),
    torch.autograd.backward: ((0, "tensors"), (1, "grad_tensors")),
    torch.autograd.grad: ((0, "outputs"), (2, "grad_outputs")),
}


def _grads_placed(func, args, kwargs):
    """(args, kwargs) of a backward call with each CPU gradient of a device output uploaded
    to that output's device; the rest as given."""
    (opos, oname), (gpos, gname) = _GRAD_SLOTS[func]
    outs, grads = _arg(args, kwargs, opos, oname), _arg(args, kwargs, gpos, gname)
    if grads is None or outs is None:
        return args, kwargs
    single = isinstance(outs, torch.Tensor)
    outs_t = (outs,) if single else tuple(outs)
    grads_t = (grads,) if isinstance(grads, torch.Tensor) else tuple(grads)
    if len(grads_t) != len(outs_t):
        return args, kwargs  # autograd's own error for the mismatch
    placed = tuple(
        upload(g, o.device.index) if type(o) is RalTensor and _is_cpu_tensor(g) else g for o, g in zip(outs_t, grads_t)
    )
    value = placed[0] if single and isinstance(grads, torch.Tensor) else placed
    if len(args) > gpos:
        args = (*args[:gpos], value, *args[gpos + 1 :])
    else:
        kwargs = {**kwargs, gname: value}
    return args, kwargs


def _has_cpu_tensor(args, kwargs) -> bool:
    """Whether any (possibly list-nested) argument is a CPU tensor; the common case in a
    device-resident computation is no, and then the mode adds no per-argument work."""
    for a in args:
        ta = type(a)
        if ta is RalTensor:
            continue
        if ta is list or ta is tuple:
            if _has_cpu_tensor(a, {}):
                return True
        elif isinstance(a, torch.Tensor) and a.device.type == "cpu":
            return True
    for v in kwargs.values():
        if isinstance(v, (torch.Tensor, list, tuple)) and _has_cpu_tensor((v,), {}):
            return True
    return False


# argument types that are never tensors (an index's slices and Ellipsis included)
_SCALARS = frozenset(
    (
        int,
        float,
        bool,
        complex,
        str,
        slice,
        type(None),
        type(...),
        torch.Size,
        torch.dtype,
        torch.memory_format,
        torch.layout,
    )
)


def _device_operands_only(args, kwargs) -> bool:
    """Whether no argument (nor element of a list or tuple argument) is a tensor other than a
    RalTensor: then a computing op has nothing to place. Per call, so types are compared
    before any isinstance; a nested list or an unlisted tensor type answers False (the full
    path decides)."""
    for a in args:
        ta = type(a)
        if ta is RalTensor or ta in _SCALARS:
            continue
        if ta is list or ta is tuple:
            for x in a:
                tx = type(x)
                if tx is not RalTensor and tx not in _SCALARS:
                    return False
            continue
        if isinstance(a, torch.Tensor) or ta is not torch.device:
            return False
    if kwargs:
        return _device_operands_only(kwargs.values(), None)
    return True


def _is_cpu_tensor(a) -> bool:
    return isinstance(a, torch.Tensor) and type(a) is not RalTensor and a.device.type == "cpu"


def _owns_cpu(a) -> bool:
    """Whether a mutated argument (a tensor, or the Tensor[] of a _foreach_*_ op or fused
    optimizer step) is CPU state: then the op runs on CPU, where that state lives."""
    if type(a) is list or type(a) is tuple:
        return any(_is_cpu_tensor(x) for x in a)
    return _is_cpu_tensor(a)


def _has_ral_tensor(args, kwargs) -> bool:
    for v in (*args, *kwargs.values()):
        if type(v) is RalTensor:
            return True
        if (type(v) is list or type(v) is tuple) and _has_ral_tensor(v, {}):
            return True
    return False


# Optimizer steps over CPU parameters run on CPU: their state (momentum, exp_avg, step
# counters) is CPU state the user owns, and foreach/fused kernels insist that a parameter
# and its state share a device. Global optimizer hooks push/pop a flag per step.
_steps = threading.local()
_hooks_installed = False
# Optimizer steps open in any thread (pushed, not yet popped). While none is, no thread can
# be in a CPU step, and the per-op check skips the thread-local lookup.
_open_steps = [0]
_steps_lock = threading.Lock()


def _count_steps(delta: int) -> None:
    with _steps_lock:
        _open_steps[0] += delta


def _cpu_params(opt) -> bool:
    return any(_is_cpu_tensor(p) for group in opt.param_groups for p in group["params"])


def _step_pre(opt, args, kwargs):
    # Deferred running statistics live at most one training iteration: code outside the mode's
    # view (DDP's buffer broadcast before the next forward, a C++ reader) finds them home.
    _settle_all()
    stack = getattr(_steps, "stack", None)
    if stack is None:
        stack = _steps.stack = []
    stack.append(_cpu_params(opt))
    _count_steps(1)


def _step_post(opt, args, kwargs):
    stack = getattr(_steps, "stack", None)
    if stack:
        stack.pop()
        _count_steps(-1)


def _in_cpu_step() -> bool:
    stack = getattr(_steps, "stack", None)
    return bool(stack) and stack[-1]


def _install_step_hooks() -> None:
    global _hooks_installed
    if not _hooks_installed:
        register_optimizer_step_pre_hook(_step_pre)
        register_optimizer_step_post_hook(_step_post)
        _install_checkpoint_support()
        _hooks_installed = True


# torch.utils.checkpoint recomputes the forward inside backward, on an autograd thread where
# no ral_mode is active: the recomputed values came out on CPU and failed checkpoint's
# metadata check. Both variants are taught to recompute inside the mode that was active when
# the checkpointed forward ran; with no ral_mode active they behave exactly as before.
def _active_ral_mode():
    for m in reversed(torch.overrides._get_current_function_mode_stack()):
        if isinstance(m, ral_mode):
            return m
    return None


def _install_checkpoint_support() -> None:
    original_generator = _checkpoint._checkpoint_without_reentrant_generator
    noop = _checkpoint.noop_context_fn

    def generator(fn, preserve_rng_state=True, context_fn=noop, *args, **kwargs):
        mode = _active_ral_mode()
        if mode is not None and context_fn is noop:

            def context_fn():
                return contextlib.nullcontext(), ral_mode(mode.device, mode.rng)

        return original_generator(fn, preserve_rng_state, context_fn, *args, **kwargs)

    _checkpoint._checkpoint_without_reentrant_generator = generator
    cls = _checkpoint.CheckpointFunction
    forward, backward = cls.forward, cls.backward

    def reentrant_forward(ctx, run_function, preserve_rng_state, *args):
        ctx.ral_mode = _active_ral_mode()
        return forward(ctx, run_function, preserve_rng_state, *args)

    def reentrant_backward(ctx, *grads):
        mode = getattr(ctx, "ral_mode", None)
        if mode is None:
            return backward(ctx, *grads)
        with ral_mode(mode.device, mode.rng):
            return backward(ctx, *grads)

    cls.forward = staticmethod(reentrant_forward)
    cls.backward = staticmethod(reentrant_backward)


_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_grad_enabled = torch.is_grad_enabled
_any_autocast = torch._C._is_any_autocast_enabled  # one argument-free C call per op
_TENSOR_COPY = torch.Tensor.copy_
_TENSOR_ITEM = torch.Tensor.item  # a pass-through call with a shortcut (dispatch/shortcuts.py)
_MISS = object()  # _compute_cached: not served, take the general path


def _map(v, fn):
    if isinstance(v, torch.Tensor):
        return fn(v)
    if type(v) is list or type(v) is tuple:
        return type(v)(_map(x, fn) for x in v)
    return v


def _down_traced(t):
    return t.to("cpu") if t.device.type != "cpu" else t


def _is_cpu_traced(a) -> bool:
    # Under a tracer a device tensor is a fake tensor on ral, not a RalTensor: ask the device.
    return isinstance(a, torch.Tensor) and a.device.type == "cpu"


def _is_ral(a) -> bool:
    return type(a) is RalTensor or type(a) is RalMathView


def _is_device_tensor(a) -> bool:
    return isinstance(a, torch.Tensor) and a.device.type == "ral"


def _owns_cpu_traced(a) -> bool:
    if type(a) is list or type(a) is tuple:
        return any(_is_cpu_traced(x) for x in a)
    return _is_cpu_traced(a)


def _has_device_tensor(args, kwargs) -> bool:
    for v in (*args, *kwargs.values()):
        if _is_device_tensor(v):
            return True
        if (type(v) is list or type(v) is tuple) and _has_device_tensor(v, {}):
            return True
    return False


def _static_kind(func) -> int:
    """_kind(func), which Dynamo takes as a constant (marked below)."""
    # Dynamo runs this for real while it traces the mode, which may be before it meets any
    # RalTensor (a CPU model whose uploads are graph ops): the compile-time extensions
    # (inductor's code generator for "ral") must be in place by then.
    first_trace()
    return _kind(func)


def _mark_static_kind() -> None:
    # The kind of a function is a fact about the function: Dynamo calls the classifier and
    # keeps its answer instead of tracing it, which would guard on every key of _KINDS and
    # recompile whenever eager code classifies a new function. Marked when torch._dynamo is
    # imported (never earlier: that import takes seconds).
    torch.compiler.assume_constant_result(_static_kind)


when_imported("torch._dynamo", _mark_static_kind)
# torch.compile's device interface for "ral", in place before any compile asks for it
when_imported("torch._dynamo.device_interface", dynamo_interface.register)

_compiling = torch.compiler.is_compiling


def _down(t):
    if type(t) is RalTensor:
        return to_cpu(t)
    return host_values(t) if type(t) is RalMathView else t


def _forget(v) -> None:
    """Drop the cached device twins of the CPU tensors in v (a tensor or a list of them)."""
    for t in v if type(v) is list or type(v) is tuple else (v,):
        if _is_cpu_tensor(t):
            _cache_drop(t)
            if t._base is not None:
                _cache_drop(t._base)
            if t.layout is torch.strided:
                _invalidate_storage(t)


def _down_differentiable(t):
    """A device operand downloaded for a CPU op, through autograd where it records (a sparse
    product's dense operand came out of device layers that train)."""
    if not isinstance(t, RalTensor):
        return t
    if t.requires_grad and torch.is_grad_enabled():
        return t.to("cpu")
    return _down(t)


def _on_cpu(kind, func, args, kwargs):
    """Run func on CPU, device operands downloaded. An in-place op may mutate CPU tensors
    without bumping their version counters (the fused optimizer kernels do not), so the
    upload cache forgets every CPU tensor it was given."""
    if _PENDING:
        _settle(args, kwargs)
    down = _down if kind == _INPLACE else _down_differentiable
    out = func(*_map(list(args), down), **{k: _map(v, down) for k, v in kwargs.items()})
    if kind == _INPLACE:
        for a in (*args, *kwargs.values()):
            _forget(a)
    return out


class ral_mode(TorchFunctionMode):
    """`with torch_fl.ral_mode("ral:0"):` runs the enclosed PyTorch code on a ral device."""

    def __init__(self, device="ral:0", rng: str = "cpu"):
        super().__init__()
        if rng not in ("cpu", "device"):
            raise ValueError(f"rng must be 'cpu' (CPU generator, CPU-identical numbers) or 'device', got {rng!r}")
        self.rng = rng
        index = parse_device(device)  # raises a clear error for a device that does not exist
        if index is None:
            raise ValueError(f"ral_mode needs a ral device, got {device!r}")
        self.index = index
        self.device = torch.device("ral", self.index)
        _install_step_hooks()

    def __enter__(self):
        # Writes made between two blocks may bypass every version counter (`p.data` updates,
        # numpy views): each block starts from fresh uploads.
        flush_upload_cache()
        return super().__enter__()

    def __exit__(self, *exc):
        # The next block starts from fresh uploads anyway: release the twins' device memory
        # and the weak references on CPU tensors now (Module._apply's swap refuses a tensor
        # with a weak reference: `model.to("ral:0")` after a block must work).
        try:
            flush_upload_cache()  # copies deferred running statistics home (may raise a kernel error)
        except Exception:
            if exc[0] is None:  # the block's own exception, if any, is the one to see
                raise
        finally:
            # a step that raised never ran its post hook: do not let its flag outlive the block
            if getattr(_steps, "stack", None):
                _count_steps(-len(_steps.stack))
                _steps.stack.clear()
            super().__exit__(*exc)

    def _init(self, func, args, kwargs, on_device):
        """torch.nn.init.* (fills a tensor in place). Under rng="cpu" on a device tensor it runs
        on a CPU twin (CPU's generator and algorithm, so CPU's values), copied into the tensor."""
        target = _arg(args, kwargs, 0, "tensor")
        if self.rng == "cpu" and on_device(target) and func.__name__.endswith("_"):
            host = torch.empty(target.shape, dtype=target.dtype, device="cpu")
            func(host, *args[1:], **{k: v for k, v in kwargs.items() if k != "tensor"})
            with torch.no_grad():
                target.copy_(host)
            return target
        return func(*args, **kwargs)

    def _cpu_rng(self, kind, func, args, kwargs, traced=False):
        """Run a random op on CPU (PyTorch's generator and algorithm), then place the result.
        `traced`: under a tracer, with `.to()` graph ops for the moves (see _traced)."""
        if kind == _DROPOUT and not _arg(args, kwargs, 2, "training", True):
            return func(*args, **kwargs)  # eval-mode dropout: the identity, on any device
        if kwargs.get("pin_memory") and kwargs.get("device") is not None:
            return func(*args, **kwargs)  # a device factory asked to pin: PyTorch's error (see _PIN)
        gen = kwargs.get("generator")
        if isinstance(gen, torch.Generator) and gen.device.type == "ral":
            # the CPU op draws from a CPU generator seeded from (and advancing) the ral one
            kwargs = dict(kwargs, generator=rng.cpu_generator(gen.device.index or 0, gen))
        if traced:
            down, on_device = _down_traced, _is_device_tensor

            def up(t):
                return t.to(self.device)
        else:
            on_device = _is_ral

            down = _down

            def up(t):  # a fresh CPU result: nothing to cache
                return to_device(t, self.index)

        if kind == _RNG_INPLACE:
            target = args[0]
            if not on_device(target):
                return func(*args, **kwargs)
            host = torch.empty(target.shape, dtype=target.dtype, device="cpu")
            getattr(host, func.__name__)(*_map(list(args[1:]), down), **{k: _map(v, down) for k, v in kwargs.items()})
            target.copy_(host)
            return target
        if kind == _DROPOUT:
            x = _arg(args, kwargs, 0, "input")
            p = _arg(args, kwargs, 1, "p", 0.5)
            training = _arg(args, kwargs, 2, "training", True)
            inplace = _arg(args, kwargs, 3, "inplace", False)
            if not on_device(x) or not training or p == 0 or p == 1 or inplace:
                return func(*args, **kwargs)
            # CPU's own recipe (aten _dropout_impl): a Bernoulli(1-p) mask scaled by 1/(1-p).
            noise = torch.empty(x.shape, dtype=x.dtype, device="cpu").bernoulli_(1 - p).div_(1 - p)
            return x * up(noise)
        device = kwargs.get("device")
        if device is not None and torch.device(device).type not in ("ral", "privateuseone"):
            return func(*args, **kwargs)
        cpu_kwargs = {k: _map(v, down) for k, v in kwargs.items() if k != "device"}
        result = func(*_map(list(args), down), **cpu_kwargs)
        requires_grad = kwargs.get("requires_grad", False)
        out = up(result.detach())
        return out.requires_grad_(True) if requires_grad else out

    def _shortcut(self, short, args, kwargs):
        """A shortcut (dispatch/shortcuts.py: the same values, no operand mutated) called on
        the cached twins of its positional CPU operands; _MISS when one is not a current hit."""
        dev = self.index
        twins = []
        for a in args:
            if type(a) is not RalTensor and isinstance(a, torch.Tensor):
                a = _twin_hit(a, dev)
                if a is _MISS:
                    return _MISS
            twins.append(a)
        for v in kwargs.values():
            if type(v) is not RalTensor and isinstance(v, torch.Tensor):
                return _MISS
        return short(*twins, **kwargs)

    def _compute_cached(self, func, args, kwargs):
        """A computing op whose CPU operands are all current upload-cache hits (the steady
        state of a loop): the general path below, minus its per-operand walks. Returns
        _MISS for anything else (an upload, a nested list, a tensor that needs a
        differentiable upload, running statistics), which the general path serves."""
        if func in _RUNNING_STATS:
            return _MISS
        dev = self.index
        uploaded = []
        dev_args = None
        i = -1
        for a in args:
            i += 1
            ta = type(a)
            if ta is RalTensor or ta is int or a is None:  # the common operands, no isinstance
                continue
            if ta is list or ta is tuple:
                for x in a:
                    if isinstance(x, torch.Tensor):
                        break
                else:  # sizes, dims: nothing to place
                    continue
                mapped = [_cached_twin(x, dev, uploaded) if isinstance(x, torch.Tensor) else x for x in a]
                if any(x is _MISS for x in mapped):
                    return _MISS
                twin = ta(mapped)
            elif isinstance(a, torch.Tensor):
                twin = _cached_twin(a, dev, uploaded)
                if twin is _MISS:
                    return _MISS
            else:
                continue
            if dev_args is None:
                dev_args = list(args)
            dev_args[i] = twin
        dev_kwargs = kwargs
        for k, v in kwargs.items():
            tv = type(v)
            if tv is RalTensor:
                continue
            if tv is list or tv is tuple:
                if any(isinstance(x, torch.Tensor) for x in v):
                    return _MISS
                continue
            if isinstance(v, torch.Tensor):
                twin = _cached_twin(v, dev, uploaded)
                if twin is _MISS:
                    return _MISS
                if dev_kwargs is kwargs:
                    dev_kwargs = dict(kwargs)
                dev_kwargs[k] = twin
        if not uploaded:
            return func(*args, **kwargs)  # all operands already on a device: nothing to move
        stats["cache_hits"] += len(uploaded)
        out = func(*(args if dev_args is None else dev_args), **dev_kwargs)
        for t, twin, version in uploaded:
            if _version_of(twin) != version:
                _write_back(t, twin)
        return out

    def _traced(self, func, args, kwargs):
        """The rules of __torch_function__ below in ops a tracer can record (torch.compile
        inlines this mode): uploads and downloads are `.to()` graph ops (differentiable, not
        cached: the compiled graph reads its CPU inputs afresh on every call) instead of the
        runtime's native calls, which Dynamo cannot trace."""
        kind = _static_kind(func)
        if kind == _PASS or kind == _SWAP or kind == _NUMPY or kind == _SET_DATA or kind == _BACKWARD:
            return func(*args, **kwargs)
        if kind == _PIN:
            return _pin(func, args, kwargs)
        if kind == _HOST_ONLY:
            return func(*_map(list(args), _down_traced), **{k: _map(v, _down_traced) for k, v in kwargs.items()})
        if kind == _INIT:
            return self._init(func, args, kwargs, _is_device_tensor)
        if kind >= _RNG_INPLACE:
            if self.rng == "cpu":
                return self._cpu_rng(kind, func, args, kwargs, traced=True)
            if kind == _RNG and not any(isinstance(a, torch.Tensor) for a in args):
                kind = _FACTORY
        if kind == _FACTORY:
            return _factory_call(func, args, kwargs, self.device)
        on_device = _has_device_tensor(args, kwargs)
        if kind == _VIEW and args and _is_cpu_traced(args[0]) and not on_device:
            return func(*args, **kwargs)  # a CPU view of CPU data: stays CPU state
        if kind == _INPLACE and args and _owns_cpu_traced(args[0]) or _owns_cpu_traced(kwargs.get("out")):
            return func(*_map(list(args), _down_traced), **{k: _map(v, _down_traced) for k, v in kwargs.items()})
        sparse, uploaded = [], []

        def up(t):
            if t.device.type != "cpu":
                return t
            if t.layout is not torch.strided:
                sparse.append(t)  # ral devices refuse sparse layouts: the op runs on CPU
                return t
            twin = t.to(self.device)
            uploaded.append((t, twin))
            return twin

        dev_args = [_map(a, up) for a in args]
        dev_kwargs = {k: _map(v, up) for k, v in kwargs.items()}
        if sparse and not on_device:
            return func(*args, **kwargs)
        out = func(*dev_args, **dev_kwargs)
        # Hidden in-place updates of CPU state: the version-counter check of the eager path is
        # not traceable, so the known ones are written back (running statistics, inplace=True).
        forced = list(_mutated_buffers(func, args, kwargs)) if func in _RUNNING_STATS else []
        if kwargs.get("inplace") is True and args:
            forced.append(args[0])
        for t, twin in uploaded:
            if any(t is f for f in forced):
                with torch.no_grad():
                    t.copy_(twin)
        return out

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if _compiling():  # Dynamo is tracing this mode: record the placement in the graph
            return self._traced(func, args, kwargs or {})
        if _any_autocast() and _cpu_amp_needs_mirror():  # CPU autocast applies to the device ops (device/amp.py)
            with _mirror_cpu_amp():
                return self.__torch_function__(func, types, args, kwargs)
        kind = _KINDS.get(func)
        if kind is None:
            kind = _kind(func)
        if kind == _PASS and func is not _TENSOR_ITEM:
            # Attribute reads (`x.shape`, `p.data`), size(), dim(), ...: about a third of a
            # forward's calls. Nothing to place, and no shortcut (only item has one).
            if _PENDING:
                _settle(args, kwargs)  # `.tolist()`, `repr`, `detach()` of running statistics
            return func(*args, **kwargs) if kwargs else func(*args)
        kwargs = kwargs or {}
        if func is _TENSOR_COPY and len(args) > 1 and type(args[0]) is RalTensor and _is_cpu_tensor(args[1]):
            _settle_tensor(args[1])
            _expose(args[1])  # `device_buffer.copy_(cpu_input)`: see _EXPOSED
        short = SHORTCUTS.get(func)
        if short is not None and not _open_steps[0]:
            out = self._shortcut(short, args, kwargs)
            if out is not _MISS:
                return out
        if _PENDING and kind != _COMPUTE and kind != _VIEW:
            _settle(args, kwargs)  # CPU code is about to read or write these tensors (see _PENDING)
        if kind == _PASS:
            return func(*args, **kwargs)
        if kind == _BACKWARD:
            args, kwargs = _grads_placed(func, args, kwargs)
            return func(*args, **kwargs)
        if kind == _PIN:
            return _pin(func, args, kwargs)
        if kind == _HOST_ONLY:
            return _on_cpu(kind, func, args, kwargs)
        if kind == _NUMPY:
            if args:
                _expose(args[0])
            return func(*args, **kwargs)
        if kind == _SET_DATA:
            # `p.data = p.data - lr * p.grad` on a CPU parameter: the right side came out on
            # the device; the parameter stays the CPU state the user owns (as without the mode)
            target, value = args
            if _is_cpu_tensor(target):
                _forget(target)
                if isinstance(value, RalTensor):
                    value = _down(value)
            return func(target, value)
        if not _open_steps[0] and (
            kind == _COMPUTE or ((kind == _VIEW or kind == _INPLACE) and args and type(args[0]) is RalTensor)
        ):
            # A view or in-place op on a device tensor is served as a computing op is (the
            # general path below does the same for it); on a CPU tensor it stays CPU state.
            if _device_operands_only(args, kwargs):  # most calls of a device-resident forward
                return func(*args, **kwargs) if kwargs else func(*args)
            out = self._compute_cached(func, args, kwargs)
            if out is not _MISS:
                return out
        if _in_cpu_step():  # an optimizer step over CPU parameters: plain CPU PyTorch
            return _on_cpu(kind, func, args, kwargs)
        if kind == _SWAP:
            # Module._apply asks this of each parameter before it swaps in the parameter's
            # device copy (`model.to("ral:0")` inside the mode): a metadata query, and the
            # upload cache's weak reference on the CPU parameter would make the swap fail.
            _forget(args[0])
            return func(*args, **kwargs)
        if kind == _INIT:
            return self._init(func, args, kwargs, _is_ral)
        if kind >= _RNG_INPLACE:
            if self.rng == "cpu":
                return self._cpu_rng(kind, func, args, kwargs)
            if kind == _RNG and not any(isinstance(a, torch.Tensor) for a in args):
                kind = _FACTORY  # rand/randn/... with sizes only: create on the device
        if kind == _FACTORY:
            return _factory_call(func, args, kwargs, self.device)
        if kind == _VIEW and args and _is_cpu_tensor(args[0]) and not _has_ral_tensor(args, kwargs):
            return func(*args, **kwargs)  # a CPU view of CPU data: stays CPU state
        if kind == _INPLACE and args and _owns_cpu(args[0]) or _owns_cpu(kwargs.get("out")):
            return _on_cpu(kind, func, args, kwargs)
        if not _has_cpu_tensor(args, kwargs):
            return func(*args, **kwargs)  # all operands already on a device: nothing to move
        dev = self.index
        uploaded = []
        sparse = []

        def up(t):
            # 0-dim CPU tensors are uploaded too: many ops (meshgrid, quantile's q, masked_fill's
            # value) insist on one device, and everything in an unmodified script is on CPU.
            if type(t) is RalTensor or t.device.type != "cpu":
                return t
            if t.layout is not torch.strided or t.is_quantized:
                sparse.append(t)  # ral devices refuse sparse layouts and quantized dtypes: the op runs on CPU
                return t
            if _functorch_wrapped(t):
                # a torch.func (vmap/grad/jacrev) wrapper of CPU data has no storage to cache
                # or copy; its own `to` is the transform-aware (batched, differentiable) upload
                return t.to(self.device)
            twin = upload(t, dev)
            uploaded.append((t, twin, _version_of(twin)))
            return twin

        # Positional tensors are mapped inline (the common case: no nesting to walk).
        dev_args = [up(a) if isinstance(a, torch.Tensor) else _map(a, up) for a in args]
        dev_kwargs = {k: _map(v, up) for k, v in kwargs.items()} if kwargs else {}
        if sparse:
            # a sparse or quantized CPU operand: CPU PyTorch as without the mode, device
            # operands (results of earlier ops in the block) brought home
            return _on_cpu(_COMPUTE, func, args, kwargs)
        out = func(*dev_args, **dev_kwargs)
        forced = _mutated_buffers(func, args, kwargs) if func in _RUNNING_STATS else ()
        for t, twin, version in uploaded:
            if any(t is f for f in forced):
                _defer_write_back(t, twin)
            elif _version_of(twin) != version:
                _write_back(t, twin)
        return out


_stack_len = torch._C._len_torch_function_stack
_stack_at = torch._C._get_function_stack_at


def _pass_device_calls() -> bool:
    """Every active torch-function mode is a ral_mode outside an optimizer's CPU step: a call
    on device tensors only would go straight through (dispatch/shortcuts.py asks)."""
    if _open_steps[0]:
        return False
    n = _stack_len()
    if n == 1:  # the common case, without building a range
        return type(_stack_at(0)) is ral_mode
    return all(type(_stack_at(i)) is ral_mode for i in range(n))


shortcuts.modes_pass_device_calls = _pass_device_calls


def _plain_cpu(self, func, types, args=(), kwargs=None):
    """ral_mode in a forked child (a DataLoader worker): plain CPU PyTorch, no device."""
    return func(*args, **(kwargs or {}))


fork.on_fork_child(lambda: setattr(ral_mode, "__torch_function__", _plain_cpu))
