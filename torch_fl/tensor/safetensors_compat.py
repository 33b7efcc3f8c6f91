"""safetensors interop: `load_file(path, device="ral:0")` places the tensors on a ral device.

safetensors' Rust loader accepts only the device names it knows ("cpu", "cuda:N", ...) and
rejects "ral:0". For a ral device name, `safetensors.torch.load_file` here reads the file
on CPU (memory-mapped) and uploads each tensor; every other device goes to the original
function unchanged. Saving needs no help: RalTensor.storage() answers safetensors' shared
memory check and safetensors moves each tensor to CPU itself.

safetensors is patched when it is imported (now, if it already was), so importing
torch_fl neither imports safetensors nor changes what a script without ral devices does.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys

import torch

from torch_fl.device.index import parse_device

_MODULE = "safetensors.torch"


def _ral_index(device) -> int | None:
    """The ral index a safetensors device argument names, or None (another device, an int)."""
    if not isinstance(device, (str, torch.device)):
        return None  # an int is safetensors' own accelerator index: leave it to safetensors
    try:
        return parse_device(device)
    except (RuntimeError, ValueError):
        if isinstance(device, str) and not device.startswith("ral"):
            return None  # a name torch does not parse: safetensors gives its own error
        raise


def _patch(module) -> None:
    original = module.load_file
    if getattr(original, "_torch_fl_wrapped", False):
        return

    @functools.wraps(original)
    def load_file(filename, device="cpu", *args, **kwargs):
        index = _ral_index(device)
        if index is None:
            return original(filename, device, *args, **kwargs)
        host = original(filename, "cpu", *args, **kwargs)
        target = torch.device("ral", index)
        return {name: t.to(target) for name, t in host.items()}

    load_file._torch_fl_wrapped = True
    module.load_file = load_file


class _Loader(importlib.abc.Loader):
    """Runs safetensors.torch's own loader, then patches the module."""

    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of safetensors.torch when something imports it."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _MODULE:
            return None
        sys.meta_path.remove(self)  # find the real spec without finding ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


def register() -> None:
    """Patch safetensors.torch now if imported, else when it is first imported."""
    module = sys.modules.get(_MODULE)
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
