"""RalTensor: a wrapper subclass whose payload is a device Buffer plus sizes/strides/offset."""

from __future__ import annotations

import copy
from functools import partial

import torch

from torch_fl.device.compat import run_untraced
from torch_fl.device.guard import owns_block
from torch_fl.device.memory import Buffer, allocate, block_of, buffer_of, storage_of
from torch_fl.tensor.dlpack import dlpack_device
from torch_fl.tensor.dlpack import export as dlpack_export
from torch_fl.tensor.host_copy import to_cpu
from torch_fl.tensor.layout import contiguous_strides, extent_elems
from torch_fl.tensor.serialization import StagedStorage, reduce_ral_tensor, user_attrs

_DEVICES: list[torch.device] = []


def torch_device(index: int) -> torch.device:
    """The cached torch.device('ral', index)."""
    while len(_DEVICES) <= index:
        _DEVICES.append(torch.device("ral", len(_DEVICES)))
    return _DEVICES[index]


_make = torch.Tensor._make_wrapper_subclass
_no_dispatch_modes = torch.utils._python_dispatch._disable_current_modes
_modes_on = torch._C._is_torch_function_mode_enabled
_NoTorchFunction = torch._C.DisableTorchFunction


def outside_modes(fn):
    """Run fn with torch-function modes (ral_mode) off: torch_fl's own tensor plumbing
    must create CPU tensors where it says CPU, even inside a user's ral_mode block."""

    def wrapper(*args, **kwargs):
        if _modes_on():
            with _NoTorchFunction():
                return fn(*args, **kwargs)
        return fn(*args, **kwargs)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


_get_metadata = torch._C._get_tensor_metadata
_set_metadata = torch._C._set_tensor_metadata


def _flatten(self):
    # The context must compare equal across calls (Dynamo guards on it): no buffer here. The
    # backend metadata rides along, so a fake of the tensor carries it (as PyTorch's fakes do).
    return ["_flat_payload"], (self._dev, self.dtype, tuple(sorted(_get_metadata(self).items())))


class _FlattenOutsideBackward:
    """`__tensor_flatten__`, hidden from instances while autograd runs a backward node outside
    any tracer. Tracers need the flatten protocol to see a RalTensor as a device tensor, but
    a compiled graph's runtime treats the gradients it receives in backward as plain tensors
    (that is how they were traced) and rejects a flattenable one."""

    def __get__(self, obj, cls=None):
        if obj is not None and _autograd_node() is not None and _tracing_context() is None:
            raise AttributeError("__tensor_flatten__")
        return _flatten.__get__(obj, cls) if obj is not None else _flatten


_autograd_node = torch._C._current_autograd_node
_tracing_context = torch._guards.TracingContext.try_get


own_storage = torch._C.TensorBase.untyped_storage  # the C++ storage (RalTensor overrides the method)


class _BufferOfOwnStorage:
    """`_buf` of a RalTensor that has none yet: the Buffer of the tensor's C++ storage, kept
    from then on. Only tensors made inside torch.jit.load start without one
    (tensor/jit_load.py): TorchScript's loader points their C++ storage at an uploaded
    tensor's, which owns its device block. Other RalTensors hold `_buf` in their __dict__,
    which this non-data descriptor leaves first in line."""

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        storage = own_storage(obj)
        if storage.nbytes() == 0 and not owns_block(storage):
            buf = allocate(obj._dev, 0)  # an empty tensor's storage: any 0-byte block serves
        else:
            buf = buffer_of(storage)
        obj.__dict__["_buf"] = buf
        return buf


def _copied_buffer(buf, memo) -> Buffer:
    """A device copy of a whole buffer, made once per deepcopy (`memo`): views of one buffer
    deep-copied together share the copy, as CPU tensors' storages do."""
    key = ("torch_fl.buffer", id(buf))
    done = memo.get(key)
    if done is None:
        flat = RalTensor(buf, (buf.nbytes,), (1,), 0, torch.uint8)
        with torch.no_grad():
            done = memo[key] = (flat.clone()._buf, buf)  # buf kept: its id stays unique meanwhile
    return done[0]


class RalTensor(torch.Tensor):
    """A tensor on a ral device: a wrapper whose payload `_buf` is the device allocation.

    Views share `_buf`; sizes, strides and storage_offset (in elements) live in the wrapper.
    `untyped_storage()` is the buffer's torch storage, made on first request (device/memory.py).
    """

    _buf: Buffer = _BufferOfOwnStorage()
    _dev: int
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, buf, size, stride, offset, dtype, requires_grad=False):
        t = _make(
            cls,
            size,
            strides=stride,
            storage_offset=offset,
            dtype=dtype,
            device=torch_device(buf.device),
            requires_grad=requires_grad,
        )
        t._buf = buf
        t._dev = buf.device
        return t

    _sig = None

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if _modes_on():
            with _NoTorchFunction():
                return _dispatch(func, args, kwargs or {})
        return _dispatch(func, args, kwargs or {})

    __tensor_flatten__ = _FlattenOutsideBackward()

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        """A compiled graph traced this gradient as a plain device tensor: it already is one."""
        return self

    @property
    def _flat_payload(self):
        # Subclass-aware machinery (torch.compile, swap_tensors) asks for inner tensors. The
        # payload is device memory, not a tensor, so the inner tensor is a storage-free meta
        # tensor of the same geometry; __tensor_unflatten__ turns its fake into a plain fake
        # tensor on the ral device (see torch_fl/compile/fake.py).
        # Cached per tensor: Dynamo's no-aliasing guard compares the ids of inner tensors, and
        # fresh temporaries could reuse one another's id.
        inner = self.__dict__.get("_flat_inner")
        if (
            inner is None
            or inner._ral_buf is not self._buf
            or inner.dtype != self.dtype
            or inner.shape != self.shape
            or inner.stride() != self.stride()
            or inner.storage_offset() != self.storage_offset()
        ):
            inner = meta_like(self)
            inner._ral_buf = self._buf
            self.__dict__["_flat_inner"] = inner
        return inner

    @staticmethod
    def __tensor_unflatten__(inner_tensors, meta, outer_size, outer_stride):
        inner = inner_tensors["_flat_payload"]
        if inner.device.type == "meta" and type(inner) is not torch.Tensor:
            return _fake_on_ral(inner, meta, outer_size, outer_stride)
        out = wrap(inner._ral_buf, outer_size, outer_stride, inner.storage_offset(), meta[1])
        if len(meta) > 2 and meta[2]:
            _set_metadata(out, dict(meta[2]))
            adopt_bits(out)
        return out

    @outside_modes
    def __repr__(self, *, tensor_contents=None):
        body = repr(host_values(self).detach())
        body = body[len("tensor(") : -1] if body.startswith("tensor(") else body
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"tensor({body}, device='{self.device}'{grad})"

    @outside_modes
    def __reduce_ex__(self, protocol):
        return reduce_ral_tensor(self)

    def __copy__(self):
        """copy.copy: a new leaf tensor over the same device buffer and geometry, as copy.copy of
        a CPU or CUDA tensor rebuilds one over the same storage (without this, copy.copy went
        through the pickling reduce and returned a CPU tensor), with requires_grad, backend
        metadata and the Python attributes (a Parameter stays one)."""
        new = wrap(self._buf, self.shape, self.stride(), self.storage_offset(), self.dtype)
        meta = _get_metadata(self)
        if meta:  # backend metadata and the conjugate/negative bits, as on a CPU tensor
            _set_metadata(new, meta)
            adopt_bits(new)
        if self.requires_grad:
            new.requires_grad_(True)
        for k, v in user_attrs(self).items():
            setattr(new, k, v)
        return new

    @outside_modes
    def __deepcopy__(self, memo):
        if not self.is_leaf:  # CPU's check and message
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at "
                "the moment.  If you were attempting to deepcopy a module, this may be because of a "
                "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001"
            )
        if id(self) in memo:
            return memo[id(self)]
        new = RalTensor(_copied_buffer(self._buf, memo), self.shape, self.stride(), self.storage_offset(), self.dtype)
        meta = _get_metadata(self)
        if meta:  # backend metadata, as deepcopy keeps it on a storage-backed tensor
            _set_metadata(new, meta)
            if adopt_bits(new):  # as torch.Tensor.__deepcopy__: the values, without the bits
                with torch.no_grad():
                    new = torch.ops.aten.clone.default(new)
        if self.requires_grad:
            new.requires_grad_(True)
        memo[id(self)] = new
        attrs = user_attrs(self)
        if attrs.get("_is_param"):
            # as nn.Parameter.__deepcopy__: a Parameter again (else `copy.deepcopy(model).cpu()`
            # fails), without its gradient or other attributes
            new._is_param = True
            return new
        # as torch.Tensor.__deepcopy__: the gradient and the Python attributes come along
        if self.is_leaf and self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for k, v in attrs.items():
            setattr(new, k, copy.deepcopy(v, memo))
        return new

    # torch.compile: Dynamo fakeifies a wrapper-subclass view input by replaying the view on
    # an all-dynamic base, and a view with dynamic sizes then fails in Dynamo itself ("For root
    # tracer, we only expect to bind basic symbols", PyTorch's bug, its own TwoTensor too). So a
    # ral view reports every dim as marked static (what `torch._dynamo.mark_static` records):
    # a new view geometry recompiles with static sizes instead of raising. Dims marked through
    # `mark_static` on a tensor that is not a view are kept as Dynamo keeps them.
    @property
    def _dynamo_static_indices(self):
        """Dims torch.compile treats as static: all of a view's, else those mark_static set."""
        marked = self.__dict__.get("_dynamo_static_marks")
        if self._is_view():
            return set(range(self.dim())) | (marked or set())
        if marked is None:
            raise AttributeError("_dynamo_static_indices")  # hasattr() False, as on a plain tensor
        return marked

    @_dynamo_static_indices.setter
    def _dynamo_static_indices(self, value):
        self.__dict__["_dynamo_static_marks"] = value

    @property
    def data(self):
        """The tensor without autograd history (shares the buffer)."""
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, new):
        # The payload lives on the Python object, which Tensor.data's setter does not copy.
        torch.Tensor.data.__set__(self, new)
        self._buf = new._buf
        self._dev = new._dev
        self._sig = None

    @outside_modes
    def numpy(self, *, force: bool = False):
        """Copy to host and return a NumPy array (like a CUDA tensor's .cpu().numpy(force=True))."""
        if self.requires_grad and not force:
            # the same check and message as a CPU tensor's numpy()
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return host_values(self.detach()).numpy()  # CPU's error for a conjugate or negative view

    def __format__(self, spec):
        # torch.Tensor.__format__ formats a 0-dim tensor as its Python number, but only for
        # exact torch.Tensor; f"{loss:.4f}" on a ral tensor must behave the same.
        if self.dim() == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def data_ptr(self) -> int:
        """The device address of the first element, as a CUDA tensor's data_ptr(): distinct for
        tensors that do not share memory (a wrapper tensor's own data_ptr() is the storage
        offset alone, so unrelated tensors compared equal), not dereferenceable on the host
        unless the device is host-mappable."""
        return self._buf.ptr + self.storage_offset() * self.dtype.itemsize

    def untyped_storage(self) -> torch.UntypedStorage:
        """The torch.UntypedStorage of the device buffer (one per buffer, shared by its views):
        `.device` is ral:N, `data_ptr()` the buffer's device address, `nbytes()` its size."""
        return storage_of(self._buf)

    def storage(self) -> torch.TypedStorage:
        """The (deprecated) typed storage, a real torch.TypedStorage over `untyped_storage()`
        in the tensor's dtype, as torch.Tensor.storage() builds it (and warns, as it does)."""
        torch.storage._warn_typed_storage_removal(stacklevel=2)
        return torch.TypedStorage(wrap_storage=self.untyped_storage(), dtype=self.dtype, _internal=True)

    def __dlpack_device__(self):
        """(kDLExtDev, index): PyTorch's DLPack device type for PrivateUse1 (dlpack.py)."""
        return dlpack_device(self)

    @outside_modes
    def __dlpack__(self, *, stream=-1, max_version=None, dl_device=None, copy=None):
        """A host DLPack capsule when dl_device asks for the CPU (zero-copy where the device is
        host-mappable); a device capsule raises BufferError (see tensor/dlpack.py)."""
        return dlpack_export(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def set_(self, *args, **kwargs):
        """Tensor.set_; a ral storage source (`t.untyped_storage()`, `t.storage()`) re-points
        this tensor at that device buffer (the wrapper's own storage is not the buffer's)."""
        source = args[0] if args else kwargs.get("source")
        storage = _ral_storage_of(source)
        if storage is not None:
            rest = {k: v for k, v in kwargs.items() if k != "source"}
            return _set_to_storage(self, storage, *args[1:], **rest)
        untyped = source._untyped_storage if isinstance(source, torch.TypedStorage) else source
        if isinstance(untyped, torch.UntypedStorage) and not isinstance(untyped, StagedStorage):
            # a CPU storage: sharing it is impossible, and a silent copy would drop the aliasing
            raise device_mismatch(self.device, untyped.device)
        return torch.Tensor.set_(self, *args, **kwargs)

    @outside_modes
    def tolist(self):
        """Copy to host and return nested Python lists."""
        return host_values(self.detach()).tolist()


run_untraced(RalTensor.__torch_dispatch__)  # C++ enters it for every op (device/compat.py)


def _ral_storage_of(source) -> torch.UntypedStorage | None:
    """The torch storage on a ral device a set_ source names (untyped or typed; not a
    checkpoint's staged host bytes); else None."""
    if isinstance(source, torch.TypedStorage):
        source = source._untyped_storage
    if (
        type(source) is torch.UntypedStorage  # a StagedStorage subclass holds host bytes
        and source.device.type == "ral"
    ):
        return source
    return None


def in_block(t, storage, offset: int, size, stride) -> tuple[Buffer, int]:
    """(Buffer, element offset in it) for t set_ to ral `storage` at element `offset` with this
    geometry. A storage slice `s[a:b]` is its block from the slice's start on (ral kernels
    address a tensor from its block's start), so the offset grows by the start; as on CPU, the
    tensor may not reach past the slice, which cannot grow."""
    buf, start = block_of(storage)
    if not start:
        return buf, offset
    itemsize = t.dtype.itemsize
    if start % itemsize:
        raise RuntimeError(
            f"torch_fl: this {storage.device} storage slice starts {start} bytes into its block, not "
            f"at a whole {t.dtype} element ({itemsize} bytes): ral tensors address their block in "
            "whole elements; slice at a multiple of the element size"
        )
    if (offset + extent_elems(size, stride)) * itemsize > storage.nbytes():
        raise RuntimeError("Trying to resize storage that is not resizable")  # CPU's error for a slice
    return buf, offset + start // itemsize


def device_mismatch(tensor_device, storage_device) -> RuntimeError:
    """CPU's and CUDA's error for set_ to a storage on another device."""
    return RuntimeError(
        f'Attempted to set the storage of a tensor on device "{tensor_device}" to a storage on '
        f'different device "{storage_device}".  This is no longer allowed; the devices must match.'
    )


def _set_to_storage(t, storage, storage_offset=0, size=None, stride=None):
    """t.set_(storage, offset, size, stride) for a ral storage, with CPU's checks."""
    if storage.device != t.device:
        raise device_mismatch(t.device, storage.device)
    if size is None:
        size = (storage.nbytes() // t.dtype.itemsize,)
    stride = tuple(stride) if stride else contiguous_strides(tuple(size))
    buf, offset = in_block(t, storage, int(storage_offset), tuple(size), stride)
    src = RalTensor(buf, tuple(size), stride, offset, t.dtype)
    return torch.Tensor.set_(t, src)


_STRIDED = torch.strided


def meta_like(t: torch.Tensor) -> torch.Tensor:
    """A storage-free meta tensor with t's sizes, strides, offset and dtype (never a fake or
    functional tensor, even while a tracer's dispatch mode is active)."""
    with _NoTorchFunction(), _no_dispatch_modes():
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta").as_strided(
            t.shape, t.stride(), t.storage_offset()
        )


# Called once, the first time a tracer fakeifies a RalTensor: upper layers register their
# compile-time extensions there (jit: inductor's code generator for "ral"), so importing
# torch_fl never pays for torch._inductor.
FIRST_TRACE_HOOKS: list = []


def first_trace() -> None:
    """A tracer meets ral tensors: run the FIRST_TRACE_HOOKS that have not run yet."""
    while FIRST_TRACE_HOOKS:
        FIRST_TRACE_HOOKS.pop()()


def _fake_on_ral(inner, meta, outer_size, outer_stride):
    first_trace()
    # Tracing (Dynamo, AOT) fakeifies our meta inner tensor: hand back a FakeTensor that
    # reports the ral device, so the traced program is an ordinary device program and the
    # compiled graph later runs on real RalTensors through the dispatcher.
    from torch._subclasses.fake_tensor import FakeTensor

    dev = torch_device(meta[0])
    out = FakeTensor(inner.fake_mode, _meta_elem(inner), dev)
    # A graph input that is an autograd view of a RalTensor is fakeified by replaying the view
    # on its base's fake, after asking a fake of the view for its inner tensors (PyTorch's
    # view replay for wrapper subclasses, torch/_subclasses/meta_utils.py: view_from_base).
    # This fake answers that one question. It stays a plain fake tensor to every tracer: with
    # no __tensor_unflatten__ it is not a traceable wrapper subclass.
    if len(meta) > 2 and meta[2]:  # the real tensor's backend metadata, as PyTorch's fakes keep it
        _set_metadata(out, dict(meta[2]))
    out.__tensor_flatten__ = partial(_fake_flatten, meta)
    out._flat_payload = inner
    return out


def _fake_flatten(meta):
    return ["_flat_payload"], meta


def _meta_elem(fake):
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return torch.Tensor._make_subclass(torch.Tensor, fake, fake.requires_grad)


def host_values(t) -> torch.Tensor:
    """t copied home; a lazy conjugate/negative view's bits set on the CPU copy, as CPU has them."""
    adopt_bits(t)  # a bit torch.load set after making t
    out = to_cpu(t)
    if type(t) is not RalTensor:
        if t.is_conj():
            out = out.conj()
        if t.is_neg():
            out = out._neg_view()
    return out


class RalMathView(RalTensor):
    """A RalTensor with PyTorch's lazy conjugate and/or negative bit set (tensor/math_views.py)."""


class MathViewFound(Exception):
    """A RalTensor turned out to carry a conjugate or negative bit it was given after it was
    made; it is a RalMathView now, and the dispatcher reruns the op (before any side effect:
    a signature is computed before an op runs)."""


def adopt_bits(t) -> bool:
    """Make a RalTensor that was given a conjugate or negative bit after it was made
    (torch.load's `_rebuild_tensor_v2`, `torch._utils.set_tensor_metadata`) a RalMathView,
    so that no fast path takes it for a plain one; whether it did."""
    if type(t) is RalTensor and _get_metadata(t) and (t.is_conj() or t.is_neg()):
        t.__class__ = RalMathView
        return True
    return False


def tensor_sig(t) -> tuple:
    """A RalTensor's routing signature (device, shape, dtype, True or strides), cached on it."""
    sig = t._sig
    if sig is None:
        if adopt_bits(t):
            raise MathViewFound
        sig = t._sig = (t._dev, tuple(t.shape), t.dtype, True if t.is_contiguous() else t.stride())
    return sig


def wrap(buf: Buffer, size, stride, offset: int, dtype: torch.dtype, sig=None) -> RalTensor:
    """Make a RalTensor over an existing buffer (a new tensor or a view).

    `sig` is the router's signature of the tensor (device, shape, dtype, contiguous) when
    the caller already knows it; otherwise it is computed on first use.
    """
    dev = buf.device
    try:
        device = _DEVICES[dev]
    except IndexError:
        device = torch_device(dev)
    # Positional arguments: keyword parsing is a measurable share of the per-op cost.
    t = _make(RalTensor, size, stride, offset, None, dtype, _STRIDED, device)
    t._buf = buf
    t._dev = dev
    if sig is not None:
        t._sig = sig
    return t


def _no_dispatcher(func, args, kwargs):
    raise RuntimeError("torch_fl: the dispatcher is not installed (import torch_fl, not torch_fl.tensor alone)")


# The function every aten op on a RalTensor goes to. The tensor class sits below the
# dispatcher in the layers, so the dispatcher installs itself here when it is imported.
_dispatch = _no_dispatcher


def set_dispatcher(fn) -> None:
    """Install the function that runs every aten op on a RalTensor (dispatch/entry.py)."""
    global _dispatch
    _dispatch = fn
