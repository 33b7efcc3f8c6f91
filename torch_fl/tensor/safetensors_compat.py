"""safetensors interop: `load_file(path, device="ral:0")` places the tensors on a ral device.

safetensors' Rust loader accepts only the device names it knows ("cpu", "cuda:N", ...) and
rejects "ral:0". For a ral device name, `safetensors.torch.load_file` here reads the file
on CPU (memory-mapped) and uploads each tensor; every other device goes to the original
function unchanged. Saving needs no help: a ral tensor's storage answers safetensors' shared
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
    """Patch safetensors.torch now if imported, else when it is first imported."""
    when_imported(_MODULE, lambda: _patch(sys.modules[_MODULE]))
