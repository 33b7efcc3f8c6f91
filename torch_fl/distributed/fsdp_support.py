"""FSDP2 (`fully_shard`) on ral devices.

FSDP2 frees an unsharded parameter between uses with `tensor.untyped_storage().resize_(0)` and
brings it back with `resize_(nbytes)`; the unsharded parameter is a view of the all-gather output,
so both must see the change. A ral tensor has no torch storage; its payload is a device Buffer
shared by all its views, so the same effect is resizing that Buffer in place. This module swaps
FSDP2's two helpers for versions that do that for ral tensors and defer to the originals otherwise.
"""

from __future__ import annotations

from . import _device_io as io


def install() -> bool:
    """Patch FSDP2's alloc_storage/free_storage (idempotent); False if this torch has no FSDP2."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
    except ImportError:  # pragma: no cover - torch without FSDP2
        return False
    if getattr(_fsdp_param.alloc_storage, "_torch_fl", False):
        return True
    orig_alloc, orig_free = _fsdp_param.alloc_storage, _fsdp_param.free_storage

    def alloc_storage(tensor) -> None:
        """FSDP2's alloc_storage, ral-aware."""
        if io.is_ral(tensor):
            io.resize_buffer(tensor, tensor.numel() * tensor.itemsize)
        else:
            orig_alloc(tensor)

    def free_storage(tensor) -> None:
        """FSDP2's free_storage, ral-aware."""
        if io.is_ral(tensor):
            io.resize_buffer(tensor, 0)
        else:
            orig_free(tensor)

    alloc_storage._torch_fl = free_storage._torch_fl = True
    _fsdp_param.alloc_storage = alloc_storage
    _fsdp_param.free_storage = free_storage
    _fsdp_param_group.alloc_storage = alloc_storage
    return True
