"""torch.save / torch.load of ral tensors, honouring map_location.

A ral tensor is saved as a CPU storage whose location tag is "ral:N". On load, PyTorch's own
map_location logic rewrites that tag (or not) and calls our deserializer for "ral" tags; the
rebuild function then moves the data to the device the tag finally names, or keeps it on CPU.
"""

from __future__ import annotations

import torch
from torch.utils.weak import WeakIdKeyDictionary

from torch_fl.device import compat
from torch_fl.tensor.host_copy import to_cpu

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


def _rebuild_ral(typed_storage, storage_offset, size, stride, requires_grad, state=None):
    """Unpickle a ral tensor: CPU data, moved to the ral device its location tag names."""
    untyped = typed_storage._untyped_storage
    cpu = torch.empty(0, dtype=typed_storage.dtype).set_(untyped, storage_offset, size, stride)
    tag = _tag_of(untyped)
    t = cpu.to(tag) if tag is not None else cpu
    state = dict(state or {})
    if state.pop("_is_param", False):  # a parameter stays one (torch.save(model), deepcopy)
        t = torch.nn.Parameter(t, requires_grad=requires_grad)
    elif requires_grad:
        t.requires_grad_(True)
    for k, v in state.items():
        setattr(t, k, v)
    return t


def reduce_ral_tensor(t):
    """__reduce_ex__ of a RalTensor."""
    cpu = to_cpu(t.detach())
    untyped = cpu.untyped_storage()
    _mark(untyped, f"ral:{t._dev}")
    typed = torch.storage.TypedStorage(wrap_storage=untyped, dtype=cpu.dtype, _internal=True)
    args = (typed, cpu.storage_offset(), tuple(cpu.shape), cpu.stride(), t.requires_grad)
    state = user_attrs(t)
    return (_rebuild_ral, (*args, state) if state else args)


def register() -> None:
    """Install the location tagger/deserializer and allow _rebuild_ral under weights_only."""
    torch.serialization.register_package(1, _tagger, _deserializer)
    compat.allow_safe_globals([_rebuild_ral])
