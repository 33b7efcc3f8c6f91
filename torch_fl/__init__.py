"""torch_fl: run unmodified PyTorch programs on any accelerator that ships a RAL C plugin.

`import torch_fl` registers the `ral` device type (`ral:0`, `ral:1`, ...), loads every plugin
it finds, and exposes the `torch.ral` module. `with torch_fl.ral_mode("ral:0"):` runs plain
CPU code on a device.
"""

from __future__ import annotations

import os as _os
import sys as _sys

__version__ = "0.1.0"


def _light_import() -> bool:
    # The console tools (ralctl, ral-trace) need only the torch-free modules (runtime, manifest,
    # _native). A console script cannot run code before this import, so the tools are known by
    # their script name; TORCH_FL_LIGHT_IMPORT=1 asks for the same (python -m torch_fl.tools.*).
    if _os.environ.get("TORCH_FL_LIGHT_IMPORT") == "1":
        return True
    argv = getattr(_sys, "argv", None) or [""]
    return _os.path.basename(argv[0] or "") in ("ralctl", "ral-trace")


def trace(path="trace.json"):
    """Record every op, allocation and sync into a Chrome trace file: `with torch_fl.trace(path):`."""
    from .tools.trace.recorder import trace as _trace

    return _trace(path)


if not _light_import():
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
    from . import jit  # noqa: F401  (fills the router's jit slot)
    from .jit import fuse  # noqa: F401
    from .jit.fusion import install_auto as _install_auto

    _install_auto(ral_mode)
    if _os.environ.get("TORCH_FL_TRACE"):
        # Set by `ral-trace run`: record this whole process (see torch_fl/tools/README.md).
        from .tools.trace.recorder import start_from_env as _start_trace

        _start_trace()


def reload_manifests() -> None:
    """Re-read every plugin's manifest and drop cached routing decisions (no restart)."""
    from .router import invalidate

    _REGISTRY.reload()
    invalidate()


def rescan() -> None:
    """Look for new/removed plugins and devices (hot plug), then reload manifests."""
    from .runtime import rescan as _rescan

    _rescan()
    _backend.guard.load(__import__("torch_fl.runtime", fromlist=["x"]).device_count())
    reload_manifests()


def plugins():
    """Every plugin with its status (LOADED, DEGRADED, INVALID_MANIFEST, MISSING_DEPS, ...)."""
    return list(_REGISTRY.plugins)


def devices():
    """Device descriptors of every visible ral device."""
    from .runtime import device_records

    return device_records()
