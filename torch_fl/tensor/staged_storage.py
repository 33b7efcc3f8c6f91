"""`ral_tensor.set_(storage, offset, size, stride)` below the Python method (PyTorch's C++
callers: storage copies, torch.load's `_rebuild_tensor`).

With host bytes it is how torch.load places a checkpoint's storages on a ral device
(tensor/serialization.py): each host storage is uploaded once (per dtype-independent byte
buffer, held as long as the storage lives), so the views a checkpoint saved together share one
device buffer again. With a ral storage the tensor shares that storage's device buffer.
"""

from __future__ import annotations

import torch
from torch.utils.weak import WeakIdKeyDictionary

from torch_fl.tensor.jit_save import tensor_being_saved
from torch_fl.tensor.ral_tensor import device_mismatch, in_block
from torch_fl.tensor.restride import restride
from torch_fl.tensor.serialization import StagedStorage
from torch_fl.tensor.transfer import to_device

# host storage (weakly, by identity) -> {device index: 1-D uint8 ral tensor of its bytes}
_UPLOADED = WeakIdKeyDictionary()


def is_host_bytes(storage) -> bool:
    """Whether a storage handed to set_ holds host bytes (a staged checkpoint storage, which is
    uploaded, or CPU, which is refused)."""
    return isinstance(storage, StagedStorage) or (
        isinstance(storage, torch.UntypedStorage) and storage.device.type == "cpu"
    )


def set_from_host_storage(t, storage, offset: int, size, stride):
    """Point ral tensor t at the device copy of a checkpoint's staged host storage with the given
    geometry; a plain CPU storage gets CPU's device-mismatch error (an upload would silently
    drop the sharing that set_ promises)."""
    if not isinstance(storage, StagedStorage):
        raise device_mismatch(t.device, storage.device)
    per_device = _UPLOADED.setdefault(storage, {})
    whole = per_device.get(t._dev)
    if whole is None:
        host = torch.empty(0, dtype=torch.uint8, device="cpu").set_(storage, 0, (storage.nbytes(),), (1,))
        whole = per_device[t._dev] = to_device(host, t._dev)
        storage.note_device_copy(whole)
    return restride(t, whole._buf, size, stride, offset)


def is_ral_storage(storage) -> bool:
    """Whether a storage handed to set_ is a torch storage of ral device memory."""
    return type(storage) is torch.UntypedStorage and storage.device.type == "ral"


def set_from_ral_storage(t, storage, offset: int, size, stride):
    """Point ral tensor t at a ral storage's device buffer (a storage slice's: from the slice's
    start), with CPU's device check."""
    if storage.device != t.device:
        raise device_mismatch(t.device, storage.device)
    try:
        buf, offset = in_block(t, storage, offset, size, stride)
    except RuntimeError:
        saved = tensor_being_saved(storage)  # torch.jit.save reading a wrapper's own storage
        if saved is None:
            raise
        buf = saved._buf
    return restride(t, buf, size, stride, offset)
