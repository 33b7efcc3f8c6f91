"""The public, torch-facing API. Importing it registers the `ral` device with PyTorch.

Registration runs no vendor code: plugins are loaded and initialised at the first device use
or an explicit query (torch.ral.init(), device_count(), ...), as CUDA initialises lazily.

`import torch_fl` imports this module whenever torch is already imported (the usual case,
and always under `import torch` autoload); a tool that runs without torch (ralctl) gets the
torch-free core only, until it asks for a public name here.
"""

import os as _os

from torch_fl.core.errors import (
    AbiMismatchError,
    CompileError,
    DeviceHangError,
    DeviceLostError,
    IndexOutOfRangeError,
    InvalidPointerError,
    KernelError,
    ManifestError,
    MissingDependencyError,
    RalError,
    UnsupportedError,
)
from torch_fl.core.registry import REGISTRY as _REGISTRY
from torch_fl.core.runtime import device_count as _device_count
from torch_fl.core.runtime import device_records as _device_records
from torch_fl.core.runtime import ensure_initialized as _ensure_initialized
from torch_fl.core.runtime import on_initialized as _on_initialized
from torch_fl.core.runtime import rescan as _rescan_runtime
from torch_fl.core.sdk import get_include as get_include
from torch_fl.device import amp as _amp
from torch_fl.device import backend as _backend
from torch_fl.device import guard as _guard
from torch_fl.device.errors import OutOfMemoryError
from torch_fl.device.sync import device_timeout, set_device_timeout
from torch_fl.dispatch import amp_ops as _amp_ops  # noqa: F401 (GradScaler's ops on the device)
from torch_fl.dispatch import out_composites as _out_composites
from torch_fl.dispatch import sdpa_entry as _sdpa_entry
from torch_fl.dispatch import shortcuts as _shortcuts
from torch_fl.dispatch import uint8_operands as _uint8_operands  # noqa: F401 (uint8 masks and targets as on CPU)
from torch_fl.dispatch.router import clear_op_overrides, set_op_override
from torch_fl.dispatch.router import invalidate as _invalidate
from torch_fl.mode import ral_mode
from torch_fl.observe.coverage import Coverage, coverage
from torch_fl.tensor import dlpack as _dlpack
from torch_fl.tensor import dlpack_import as _dlpack_import
from torch_fl.tensor import factories as _factories
from torch_fl.tensor import ipc as _ipc
from torch_fl.tensor import lazy_params as _lazy_params
from torch_fl.tensor import safetensors_compat as _safetensors_compat
from torch_fl.tensor import serialization as _serialization
from torch_fl.tensor.op_schema import resolve_op
from torch_fl.tensor.ral_tensor import RalTensor
from torch_fl.tiers import cpu_math as _cpu_math

_REGISTRY.op_check = resolve_op
_backend.register()
_amp.register()
_factories.register()
_dlpack.BEFORE_FIRST_EXPORT.append(_dlpack_import.register)
_sdpa_entry.register()
_out_composites.register()
_shortcuts.register()
_lazy_params.register()
_serialization.register()
_ipc.register()
_safetensors_compat.register()
# Before any device work: the cpu tier runs PyTorch's VML-backed kernels on two threads.
_on_initialized(_cpu_math.warm_vml)
from torch_fl import jit  # noqa: E402 (registers the jit tier with the router)
from torch_fl.jit import fuse  # noqa: E402,F401 (public API)
from torch_fl.jit.fusion import install_auto as _install_auto  # noqa: E402

_install_auto(ral_mode)
from torch_fl import distributed  # noqa: E402,F401 (registers the ralccl collective backend)

if _os.environ.get("TORCH_FL_TRACE"):
    # Set by `ral-trace run`: record this whole process (see torch_fl/tools/README.md).
    from torch_fl.observe.recorder import start_from_env as _start_trace

    _start_trace()


def trace(path="trace.json"):
    """Record every op, allocation and sync into a Chrome trace file: `with torch_fl.trace(path):`."""
    from torch_fl.observe.recorder import trace as _trace

    return _trace(path)


def reload_manifests() -> None:
    """Re-read every plugin's manifest and drop cached routing decisions (no restart)."""
    _REGISTRY.reload()
    _invalidate()


def rescan() -> None:
    """Look for new/removed plugins and devices (hot plug), then reload manifests."""
    _rescan_runtime()
    _guard.load(_device_count())
    reload_manifests()


def plugins():
    """Every plugin with its status (LOADED, DEGRADED, INVALID_MANIFEST, MISSING_DEPS, ...)."""
    _ensure_initialized(use=False)
    return list(_REGISTRY.plugins)


def devices():
    """Device descriptors of every visible ral device."""
    return _device_records()


__all__ = [
    "AbiMismatchError",
    "CompileError",
    "DeviceHangError",
    "DeviceLostError",
    "device_timeout",
    "set_device_timeout",
    "IndexOutOfRangeError",
    "InvalidPointerError",
    "KernelError",
    "ManifestError",
    "MissingDependencyError",
    "OutOfMemoryError",
    "RalError",
    "UnsupportedError",
    "ral_mode",
    "Coverage",
    "coverage",
    "clear_op_overrides",
    "set_op_override",
    "RalTensor",
    "fuse",
    "jit",
    "trace",
    "reload_manifests",
    "rescan",
    "plugins",
    "devices",
]
