"""torch_fl: run unmodified PyTorch programs on any accelerator that ships a RAL C plugin.

`import torch_fl` registers the `ral` device type (`ral:0`, `ral:1`, ...), loads every plugin
it finds, and exposes the `torch.ral` module. `with torch_fl.ral_mode("ral:0"):` runs plain
CPU code on a device.

Layers (imports point down only; .importlinter enforces it):
tools > observe > mode > jit > dispatch > tiers > tensor > device > core > _native.
The public names live in `torch_fl.api`. When torch is not imported yet, `import torch_fl`
stays torch-free (the console tools rely on that) and the API loads as soon as torch is
imported, or on first use of a public name, whichever comes first.
"""

from __future__ import annotations

import sys as _sys
from importlib import import_module as _import_module
from importlib.util import find_spec as _find_spec

__version__ = "0.1.0"


def __getattr__(name: str):
    # Public names of torch_fl.api, loaded on first use when torch_fl was imported torch-free.
    # Subpackages (torch_fl.core, ...) are left to the import system, so the tools stay light.
    if name.startswith("_") or _find_spec(f"torch_fl.{name}") is not None:
        raise AttributeError(f"module 'torch_fl' has no attribute {name!r}")
    api = _import_module("torch_fl.api")
    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"module 'torch_fl' has no attribute {name!r}") from None


class _LoadApiAfterTorch:
    """Meta-path hook: when torch is imported after torch_fl, load torch_fl.api right after
    torch itself, so `import torch_fl; import torch` registers the device as usual."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        _sys.meta_path.remove(self)
        spec = _find_spec("torch")
        if spec is not None and spec.loader is not None:
            run_torch = spec.loader.exec_module

            def exec_module(module):
                run_torch(module)
                _import_module("torch_fl.api")

            spec.loader.exec_module = exec_module
        return spec


if "torch" in _sys.modules:
    from torch_fl.api import *  # noqa: F401,F403
    from torch_fl.autoload import after_import as _after_import  # a late import after a backward

    _after_import()
else:
    _sys.meta_path.insert(0, _LoadApiAfterTorch())
