"""torch.save / torch.load of ral tensors, honouring map_location.

A ral tensor is saved as a CPU copy of its whole device buffer (one per buffer per save, so
views saved together come back sharing one buffer) whose location tag is "ral:N". On load, PyTorch's own
map_location logic rewrites that tag (or not) and calls our deserializer for "ral" tags; the
rebuild function then moves the data to the device the tag finally names, or keeps it on CPU.
"""

from __future__ import annotations

import weakref

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


def _deserializer(storage, location: str):
    if not location.startswith("ral"):
        return None
    _mark(storage, location)
    return storage


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
    tag = _tag_of(untyped)
    if tag is None:  # map_location put it on CPU: a view of the storage, shared as on CPU
        t = torch.empty(0, dtype=dtype).set_(untyped, storage_offset, size, stride)
    else:
        per_dtype = _UPLOADS.setdefault(untyped, {})
        whole = per_dtype.get((tag, dtype))
        if whole is None:
            flat = torch.empty(0, dtype=dtype).set_(untyped, 0, (untyped.nbytes() // dtype.itemsize,), (1,))
            whole = per_dtype[(tag, dtype)] = flat.to(tag)
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
    """__reduce_ex__ of a RalTensor: its whole device buffer as one CPU storage, and its view
    of it, so views of one buffer saved together come back sharing one buffer (as on CPU)."""
    typed = _buffer_snapshot(t)
    args = (typed, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.requires_grad)
    state = user_attrs(t)
    return (_rebuild_ral, (*args, state) if state else args)


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
