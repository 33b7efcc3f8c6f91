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
    from ._face import *  # noqa: F401,F403
    from .autoload import after_import as _after_import  # late import after a backward: see autoload.py

    _after_import()


def reload_manifests() -> None:
    """Re-read every plugin's manifest and drop cached routing decisions (no restart)."""
    from .registry import REGISTRY
    from .router import invalidate

    REGISTRY.reload()
    invalidate()


def rescan() -> None:
    """Look for new/removed plugins and devices (hot plug), then reload manifests."""
    from . import guard
    from .runtime import device_count
    from .runtime import rescan as _rescan

    _rescan()
    guard.load(device_count())
    reload_manifests()


def plugins():
    """Every plugin with its status (LOADED, DEGRADED, INVALID_MANIFEST, MISSING_DEPS, ...)."""
    from .registry import REGISTRY

    return list(REGISTRY.plugins)


def devices():
    """Device descriptors of every visible ral device."""
    from .runtime import device_records

    return device_records()
