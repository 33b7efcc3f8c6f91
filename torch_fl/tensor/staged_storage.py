"""`ral_tensor.set_(storage, offset, size, stride)` with host bytes: how torch.load's
`_rebuild_tensor` places a checkpoint's storages on a ral device (tensor/serialization.py).

Each host storage is uploaded once (per dtype-independent byte buffer, held as long as the
storage lives), so the views a checkpoint saved together share one device buffer again.
"""

from __future__ import annotations

import torch
from torch.utils.weak import WeakIdKeyDictionary

from torch_fl.tensor.restride import restride
from torch_fl.tensor.serialization import StagedStorage
from torch_fl.tensor.transfer import to_device

# host storage (weakly, by identity) -> {device index: 1-D uint8 ral tensor of its bytes}
_UPLOADED = WeakIdKeyDictionary()


def is_host_bytes(storage) -> bool:
    """Whether a storage handed to set_ holds host bytes (a staged checkpoint storage or CPU)."""
    return isinstance(storage, StagedStorage) or (
        isinstance(storage, torch.UntypedStorage) and storage.device.type == "cpu"
    )


def set_from_host_storage(t, storage, offset: int, size, stride):
    """Point ral tensor t at the device copy of host storage `storage` with the given geometry."""
    per_device = _UPLOADED.setdefault(storage, {})
    whole = per_device.get(t._dev)
    if whole is None:
        host = torch.empty(0, dtype=torch.uint8, device="cpu").set_(storage, 0, (storage.nbytes(),), (1,))
        whole = per_device[t._dev] = to_device(host, t._dev)
    return restride(t, whole._buf, size, stride, offset)
