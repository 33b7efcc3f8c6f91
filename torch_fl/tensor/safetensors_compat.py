"""safetensors interop: `load_file(path, device="ral:0")` and `safe_open(path, "pt",
device="ral:0")` place the tensors on a ral device.

safetensors' Rust loader accepts only the device names it knows ("cpu", "cuda:N", ...) and
rejects "ral:0". For a ral device name, `safetensors.torch.load_file` here reads the file
on CPU (memory-mapped) and uploads each tensor, and `safetensors.safe_open` opens the file on
CPU and uploads each tensor or slice as it is read (accelerate loads big checkpoints that
way); every other device goes to the original unchanged. Saving needs no help: a ral tensor's storage answers safetensors' shared
memory check as a CPU tensor's does, and safetensors moves each tensor to CPU itself.

safetensors is patched when it is imported (now, if it already was), so importing
torch_fl neither imports safetensors nor changes what a script without ral devices does.
"""

from __future__ import annotations

import functools
import sys

import torch

from torch_fl.device.index import parse_device
from torch_fl.tensor.import_hooks import when_imported

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


class _RalSlice:
    """A lazily read slice of a safetensors tensor, uploaded when indexed."""

    def __init__(self, inner, device: torch.device):
        self._inner, self._device = inner, device

    def __getitem__(self, index):
        return self._inner[index].to(self._device)

    def __getattr__(self, name):  # get_shape, get_dtype
        return getattr(self._inner, name)


class _RalSafeOpen:
    """safetensors.safe_open(..., device="ral:N"): the file opened on CPU, each tensor or
    slice uploaded to the ral device as it is read."""

    def __init__(self, opener, filename, framework, device: torch.device, **kwargs):
        self._inner = opener(filename, framework=framework, device="cpu", **kwargs)
        self._device = device

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)

    def get_tensor(self, name):
        """The named tensor, on the ral device."""
        return self._inner.get_tensor(name).to(self._device)

    def get_tensors(self):
        """Every tensor by name, on the ral device."""
        return {k: v.to(self._device) for k, v in self._inner.get_tensors().items()}

    def get_slice(self, name):
        """A slice object whose indexing reads and uploads only the indexed part."""
        return _RalSlice(self._inner.get_slice(name), self._device)

    def __getattr__(self, name):  # keys, metadata, offset_keys
        return getattr(self._inner, name)


def _patch_safe_open(package) -> None:
    original = package.safe_open
    if getattr(original, "_torch_fl_wrapped", False):
        return

    def safe_open(filename, framework, device="cpu", **kwargs):
        index = _ral_index(device)
        if index is None:
            return original(filename, framework=framework, device=device, **kwargs)
        return _RalSafeOpen(original, filename, framework, torch.device("ral", index), **kwargs)

    safe_open.__doc__ = original.__doc__
    safe_open._torch_fl_wrapped = True
    package.safe_open = safe_open


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


def register() -> None:
    """Patch safetensors (safe_open) and safetensors.torch (load_file) now if imported, else
    when each is first imported."""
    when_imported("safetensors", lambda: _patch_safe_open(sys.modules["safetensors"]))
    when_imported(_MODULE, lambda: _patch(sys.modules[_MODULE]))
