"""The torch-facing half of `import torch_fl`: device registration, plugins, public names.

`torch_fl/__init__.py` star-imports this unless the import is light (the console tools);
a tool that later needs the device (e.g. `ralctl coverage --opinfo`) imports this module.
"""

import os as _os

from . import backend as _backend
from .errors import (  # noqa: F401
    AbiMismatchError,
    CompileError,
    DeviceLostError,
    InvalidPointerError,
    KernelError,
    ManifestError,
    MissingDependencyError,
    OutOfMemoryError,
    RalError,
    UnsupportedError,
)
from .mode import ral_mode  # noqa: F401
from .op_coverage import Coverage, coverage  # noqa: F401
from .registry import REGISTRY as _REGISTRY
from .router import clear_op_overrides, set_op_override  # noqa: F401
from .runtime import ensure_initialized as _ensure_initialized
from .tensor import RalTensor  # noqa: F401

_ensure_initialized()
_backend.register()
_REGISTRY.reload()
from . import jit  # noqa: E402,F401  (fills the router's jit slot)
from .jit import fuse  # noqa: E402,F401
from .jit.fusion import install_auto as _install_auto  # noqa: E402

_install_auto(ral_mode)
from . import distributed as _distributed  # noqa: E402,F401,I001  (registers the ralccl collective backend)

if _os.environ.get("TORCH_FL_TRACE"):
    # Set by `ral-trace run`: record this whole process (see torch_fl/tools/README.md).
    from .tools.trace.recorder import start_from_env as _start_trace

    _start_trace()

__all__ = [
    "AbiMismatchError",
    "CompileError",
    "DeviceLostError",
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
]
