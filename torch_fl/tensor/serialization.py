"""torch.save / torch.load of ral tensors, honouring map_location, in CUDA's format.

A ral tensor is saved as CUDA saves its tensors: PyTorch's own `_rebuild_tensor_v2` (or
`_rebuild_parameter`) over a storage whose location tag is "ral:N", the storage being a CPU
copy of the whole device buffer (one per buffer per save, so views saved together come back
sharing one buffer). Plain PyTorch, without torch_fl, loads it with `map_location="cpu"`
(`weights_only=True` included), as it loads a CUDA checkpoint on a machine without a GPU.

On load, PyTorch's map_location logic (a string, torch.device, dict or callable) rewrites the
tag (or not) and calls our deserializer for "ral" tags ("ral" alone: the current device). It
returns a StagedStorage: the CPU bytes, reporting the ral device, so `_rebuild_tensor` makes an
empty ral tensor and `set_`s it to the storage; that set_ (tensor/staged_storage.py) uploads
each storage once and points every view at the one device buffer.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import torch
from torch.utils.weak import WeakIdKeyDictionary

from torch_fl.device import compat
from torch_fl.tensor.host_copy import buffer_to_host

# untyped storage (held weakly, by identity) -> "ral:N": storages that belong on a ral device.
_TAGS = WeakIdKeyDictionary()


def _mark(storage, tag: str) -> None:
    _TAGS[storage] = tag


def _tag_of(storage) -> str | None:
    return _TAGS.get(storage)


def _tagger(storage):
    return _tag_of(storage)


class StagedStorage(torch.UntypedStorage):
    """CPU bytes on their way to a ral device: `.device` names the device they belong on."""

    @property
    def device(self):
        return self._ral_device

    @property
    def is_ral(self) -> bool:
        return True

    def note_device_copy(self, whole: torch.Tensor) -> None:
        """Remember a 1-D ral tensor holding a copy of these bytes (from their start), so a
        later fill of the bytes reaches it too."""
        self.__dict__.setdefault("_ral_copies", []).append(whole)

    def _set_from_file(self, *args, **kwargs):
        """PyTorch's legacy (pre-zip) checkpoint format reads a storage's bytes after the tensors
        over it were rebuilt, as CUDA's loader fills a CUDA storage its tensors already share:
        the device copies the rebuild made (of bytes not yet read) get the bytes too."""
        out = super()._set_from_file(*args, **kwargs)
        with torch._C.DisableTorchFunction():  # inside ral_mode too: CPU staging stays CPU
            for whole in self.__dict__.get("_ral_copies", ()):
                whole.copy_(torch.empty(0, dtype=whole.dtype).set_(self, 0, (whole.numel(),), (1,)))
        return out


def _ral_location(location: str) -> torch.device | None:
    """The ral device a location tag names ("ral" alone: the current device), else None."""
    if location != "ral" and not location.startswith("ral:"):
        return None
    if location == "ral":
        from torch_fl.device.index import current_device

        return torch.device("ral", current_device())
    return torch.device(location)


def _deserializer(storage, location: str):
    dev = _ral_location(location)
    if dev is None:
        return None
    if isinstance(storage, StagedStorage):
        storage._ral_device = dev
        return storage
    staged = StagedStorage(storage.nbytes())
    staged.copy_(storage)
    staged._ral_device = dev
    return staged


# A weight's transpose, kept on the weight by the linear shortcut (dispatch/shortcuts.py).
CACHED_TRANSPOSE = "_ral_t"
# Attributes a RalTensor keeps in its __dict__ for itself (the device payload and caches):
# never copied or pickled as the user's attributes.
PAYLOAD_ATTRS = frozenset({"_buf", "_dev", "_sig", "_flat_inner", CACHED_TRANSPOSE})


def user_attrs(t) -> dict:
    """The Python attributes a user (or nn.Parameter's `_is_param` mark) put on tensor t."""
    return {k: v for k, v in t.__dict__.items() if k not in PAYLOAD_ATTRS}


# (loaded untyped storage, dtype) -> its upload, a 1-D device tensor over the whole storage:
# the views of one saved buffer share one device buffer again.
_UPLOADS = WeakIdKeyDictionary()


def _rebuild_ral(typed_storage, storage_offset, size, stride, requires_grad, state=None):
    """Unpickle a ral tensor: CPU data, moved to the ral device its location tag names."""
    untyped = typed_storage._untyped_storage
    dtype = typed_storage.dtype
    tag = str(untyped.device) if isinstance(untyped, StagedStorage) else None
    if tag is None:  # map_location put it on CPU: a view of the storage, shared as on CPU
        t = torch.empty(0, dtype=dtype).set_(untyped, storage_offset, size, stride)
    else:
        per_dtype = _UPLOADS.setdefault(untyped, {})
        whole = per_dtype.get((tag, dtype))
        if whole is None:
            flat = torch.empty(0, dtype=dtype).set_(untyped, 0, (untyped.nbytes() // dtype.itemsize,), (1,))
            whole = per_dtype[(tag, dtype)] = flat.to(tag)
            untyped.note_device_copy(whole)
        t = whole.as_strided(size, stride, storage_offset)
    state = dict(state or {})
    if state.pop("_is_param", False):  # a parameter stays one (torch.save(model), deepcopy)
        t = torch.nn.Parameter(t, requires_grad=requires_grad)
    elif requires_grad:
        t.requires_grad_(True)
    for k, v in state.items():
        setattr(t, k, v)
    return t


def reduce_ral_tensor(t):
    """__reduce_ex__ of a RalTensor: its whole device buffer as one CPU storage tagged "ral:N",
    and its view of it, rebuilt by PyTorch's own functions (CUDA's format)."""
    typed = _buffer_snapshot(t)
    geometry = (typed, t.storage_offset(), tuple(t.shape), tuple(t.stride()))
    state = user_attrs(t)
    is_param = state.pop("_is_param", False)
    metadata = torch._utils.get_tensor_metadata(t)  # backend metadata, saved as CUDA's would be
    if is_param and not state:
        data = t.detach()
        if metadata:
            torch._utils.set_tensor_metadata(data, metadata)
        return (torch._utils._rebuild_parameter, (data, t.requires_grad, OrderedDict()))
    if not is_param and not state:
        extra = (metadata,) if metadata else ()
        return (torch._utils._rebuild_tensor_v2, (*geometry, t.requires_grad, OrderedDict(), *extra))
    # Python attributes on the tensor: torch_fl's own rebuild (needs torch_fl to load)
    if is_param:
        state["_is_param"] = True
    return (_rebuild_ral, (*geometry, t.requires_grad, state))


# id(buffer) -> (weak buffer, weak untyped CPU snapshot). A snapshot lives as long as the
# torch.save that made it holds it (its storage table does until the end): within that save,
# every view of the buffer pickles over the same storage; a later save copies the buffer afresh.
_SNAPSHOTS: dict[int, tuple] = {}


def _buffer_snapshot(t) -> torch.storage.TypedStorage:
    buf = t._buf
    hit = _SNAPSHOTS.get(id(buf))
    untyped = hit[1]() if hit is not None and hit[0]() is buf else None
    if untyped is None:
        if len(_SNAPSHOTS) > 256:  # drop the entries of finished saves
            for k in [k for k, v in _SNAPSHOTS.items() if v[1]() is None]:
                del _SNAPSHOTS[k]
        untyped = buffer_to_host(buf)
        _mark(untyped, f"ral:{t._dev}")
        _SNAPSHOTS[id(buf)] = (weakref.ref(buf), weakref.ref(untyped))
    return torch.storage.TypedStorage(wrap_storage=untyped, dtype=t.dtype, _internal=True)


def register() -> None:
    """Install the location tagger/deserializer and allow _rebuild_ral under weights_only."""
    torch.serialization.register_package(1, _tagger, _deserializer)
    compat.allow_safe_globals([_rebuild_ral])
