"""torch.distributed on ral devices: the `ralccl` collective backend (see docs/distributed.md).

Importing torch_fl registers it, so `dist.init_process_group("ralccl")`,
`init_process_group(device_id=torch.device("ral:0"))` and `"cpu:gloo,ral:ralccl"` all work.
"""

from __future__ import annotations

from torch_fl.tensor.import_hooks import when_imported as _when_imported

from .backend import BACKEND_NAME, RalProcessGroup, register
from .c10d_ops import install as _install_c10d_ops
from .c10d_ops import install_functional as _install_functional
from .c10d_ops import install_functional_wrapper as _install_functional_wrapper
from .dtensor_attention import install as _install_dtensor_attention
from .fsdp_support import install as _install_fsdp_support
from .p2p import CollectiveError, patch_process_group_p2p

register()
_install_c10d_ops()
_install_functional()
patch_process_group_p2p()
# Heavy modules: adapt them only if the program imports them.
_when_imported("torch.distributed._functional_collectives", _install_functional_wrapper)
_when_imported("torch.distributed.fsdp._fully_shard._fsdp_param_group", _install_fsdp_support)
_when_imported("torch.distributed.tensor", _install_dtensor_attention)

__all__ = ["BACKEND_NAME", "CollectiveError", "RalProcessGroup", "register"]
