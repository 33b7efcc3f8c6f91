"""`torch.jit.load(f, map_location="ral:N")`: ral tensors TorchScript's C++ loader can rebuild.

TorchScript's unpickler (torch/csrc/jit/serialization/unpickler.cpp) uploads each saved
storage with `tensor.to(device)`, then builds every saved tensor as `at::empty({0}, options)`
whose TensorImpl it points at the uploaded tensor's C++ storage (`set_storage_keep_dtype`),
with no dispatch. A RalTensor's data is its Python `_buf`, and a wrapper's C++ storage is a
placeholder, so those tensors kept the empty factory's 0-byte buffer and failed at first use.

So the ral factory kernels, when torch.jit.load's Python frame is right above them (C++
called them while loading), give the tensor the torch storage that owns its device block as
its C++ storage (`storage_of`) and leave `_buf` unset: RalTensor resolves it on first use
from the C++ storage (ral_tensor.py `_BufferOfOwnStorage`), which by then is the uploaded
tensor's. Only tensors made while loading pay for this.
"""

from __future__ import annotations

import sys

import torch
import torch.jit._serialization

from torch_fl.device.memory import storage_of
from torch_fl.tensor.restride import adopt_storage

# Python functions whose C++ callee builds TorchScript tensors through the factories.
_LOADERS = frozenset({torch.jit._serialization.load.__code__})
# Frames from in_jit_load up to the C++ caller's Python frame: in_jit_load, the factory
# kernel, outside_modes, _with_python_key, then the caller (torch.jit.load when TorchScript
# builds tensors). That one frame is read directly: sys._getframe(n) materializes one
# frame, where walking f_back materializes each (about 1.7 us per factory call, on every
# torch.empty on ral). tests/backend_contract/test_serialization.py fails if the depth moves.
_DEPTH = 4


def in_jit_load() -> bool:
    """Whether C++ called the current factory kernel from inside torch.jit.load."""
    try:
        return sys._getframe(_DEPTH).f_code in _LOADERS
    except ValueError:  # a stack shallower than that
        return False


def loadable(t: torch.Tensor) -> torch.Tensor:
    """Make factory result t one TorchScript's loader can re-point: its C++ storage owns its
    block, and its `_buf` is read from that storage on first use."""
    adopt_storage(t, storage_of(t._buf))
    del t.__dict__["_buf"]
    return t
