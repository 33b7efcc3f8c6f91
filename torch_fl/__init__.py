"""torch_fl: run unmodified PyTorch programs on any accelerator that ships a RAL C plugin.

`import torch_fl` registers the `ral` device type (`ral:0`, `ral:1`, ...) and exposes the
`torch.ral` module; it runs no plugin code: plugins are loaded and initialised at the first
device use (core/runtime.py), as CUDA initialises lazily. `with torch_fl.ral_mode("ral:0"):`
runs plain CPU code on a device.

Layers (imports point down only; .importlinter enforces it):
tools > observe > mode > jit > dispatch > tiers > tensor > device > core > _native.
The public names live in `torch_fl.api`. When torch is not imported yet, `import torch_fl`
stays torch-free (the console tools rely on that) and the API loads as soon as torch is
imported, or on first use of a public name, whichever comes first.
"""

from __future__ import annotations

import sys as _sys
from importlib import import_module as _import_module
from importlib.machinery import PathFinder as _PathFinder
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


def submodule_initializing(but: str = "torch_fl.autoload") -> bool:
    """True while some torch_fl submodule's body is still executing (it imported torch first).

    torch_fl.api needs every layer whole, so a first import such as `import torch_fl.mode`,
    whose `import torch` triggers the api load, must defer it: the api then loads on first
    use of a public name (`__getattr__` above).
    """
    return any(
        getattr(getattr(m, "__spec__", None), "_initializing", False)
        for name, m in list(_sys.modules.items())
        if name.startswith("torch_fl.") and name != but
    )


def _load_api_when_whole(just_run: str) -> None:
    if "torch" in _sys.modules and "torch_fl.api" not in _sys.modules and not submodule_initializing(just_run):
        _import_module("torch_fl.api")


def _run_then_load_api(spec) -> None:
    run = spec.loader.exec_module

    def exec_module(module):
        run(module)
        _load_api_when_whole(spec.name)

    spec.loader.exec_module = exec_module


class _LoadApiAfterTorch:
    """Meta-path hook while torch is not imported: load torch_fl.api as soon as torch and every
    torch_fl module importing it are whole, so `import torch_fl; import torch` and a first
    `import torch_fl.mode` register the device as usual."""

    def find_spec(self, name, path=None, target=None):
        if name.startswith("torch_fl."):
            # A torch_fl submodule that imports torch is half-built when torch finishes; the api
            # loads at its end instead.
            spec = _PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                _run_then_load_api(spec)
            return spec
        if name != "torch":
            return None
        _sys.meta_path.remove(self)
        spec = _find_spec("torch")
        if spec is not None and spec.loader is not None:
            _run_then_load_api(spec)
        return spec


def _torch_initializing() -> bool:
    # True while torch/__init__.py runs: we are being autoloaded, and torch_fl.autoload.load()
    # imports the API itself, so that a failure warns instead of breaking `import torch`.
    spec = getattr(_sys.modules["torch"], "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


if "torch" in _sys.modules and _torch_initializing():
    pass
elif "torch" in _sys.modules:
    from torch_fl.api import *  # noqa: F401,F403
    from torch_fl.autoload import after_import as _after_import  # a late import after a backward

    _after_import()
else:
    _sys.meta_path.insert(0, _LoadApiAfterTorch())
