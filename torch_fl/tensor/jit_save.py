"""`torch.jit.save` of a ScriptModule whose tensors are on ral: the archive a CUDA module gives.

TorchScript's C++ serializer reads each tensor's C++ storage directly and copies it to the
host as `at::empty({0}, options).set_(storage, 0, {n}, {1}).cpu()`. A RalTensor's C++ storage
is a placeholder (its data is the Python `_buf`), so that set_ reaches torch_fl with a storage
that names no device memory. While a save runs (its Python frame, holding the module as
`self`, is a few frames up), the placeholder is matched to the module's parameter or buffer
that owns it; the archive then holds that tensor's bytes under the location tag "ral:N", and
loads with `torch.jit.load(map_location="cpu")` in a process without torch_fl.
"""

from __future__ import annotations

import sys

from torch.jit._script import RecursiveScriptModule

from torch_fl.tensor.ral_tensor import RalTensor, own_storage

_SAVERS = frozenset({RecursiveScriptModule.save.__code__, RecursiveScriptModule.save_to_buffer.__code__})
# frames between a dispatched set_ and the save's Python frame (dispatch entry, special
# handlers, RalTensor.__torch_dispatch__); a few more are searched, never the whole stack
_DEPTH = 16


def _module_being_saved():
    f = sys._getframe(2)
    for _ in range(_DEPTH):
        if f is None:
            return None
        if f.f_code in _SAVERS:
            return f.f_locals.get("self")
        f = f.f_back
    return None


def tensor_being_saved(storage) -> RalTensor | None:
    """The RalTensor of the module torch.jit.save is saving whose C++ (placeholder) storage is
    `storage`; None outside a save. Inside one, a placeholder no parameter or buffer owns (a
    traced constant) raises RuntimeError naming the way round."""
    module = _module_being_saved()
    if module is None:
        return None
    key = storage._cdata
    for m in module.modules():
        for t in (*m.parameters(recurse=False), *m.buffers(recurse=False)):
            if type(t) is RalTensor and own_storage(t)._cdata == key:
                return t
    raise RuntimeError(
        f"torch_fl: torch.jit.save found a {storage.device} tensor that is no parameter or buffer "
        "of the module (a constant recorded by torch.jit.trace): TorchScript's serializer reads "
        "its storage in C++, which holds no ral memory. Save the module from the CPU "
        "(torch.jit.save(torch.jit.trace(model.cpu(), x.cpu()), f)); torch.jit.load(f, "
        "map_location='ral:N') places it on ral"
    )
