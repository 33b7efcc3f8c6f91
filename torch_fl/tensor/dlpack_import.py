"""Ops on plain ral tensors (`torch.from_dlpack` of a ral tensor or capsule): a PrivateUse1
fallback kernel that runs the op on RalTensors sharing their memory.

An op PyTorch sends to the PrivateUse1 key with such a tensor among its arguments (every op
without a PrivateUse1 kernel of its own) comes here; each plain ral tensor is replaced by the
RalTensor over the same memory and the op runs again, through torch_fl's dispatcher. Results are
RalTensors; an in-place or out= op returns the plain tensor it wrote. In-place ops that change a
tensor's geometry (resize_, set_, t_, ...) cannot be mirrored on the plain tensor and are refused;
a resize_ needing more bytes than the import's storage raises CPU's "not resizable" error first.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from torch_fl.tensor.factories import _with_python_key
from torch_fl.tensor.plain_ral import as_ral, is_plain_ral, locate
from torch_fl.tensor.restride import resized_geometry

_lib = None


def _geometry(r):
    return (r._buf, r.shape, r.stride(), r.storage_offset())


def plain_fallback(op, *args, **kwargs):
    """Run `op` with every plain ral tensor argument replaced by its RalTensor."""
    flat, spec = tree_flatten((args, kwargs))
    swapped = {}
    for i, a in enumerate(flat):
        if is_plain_ral(a):
            r = as_ral(a)
            swapped[id(r)] = (a, r, _geometry(r))
            flat[i] = r
    if not swapped:  # what the dispatcher said before this fallback existed
        raise NotImplementedError(f"Could not run '{op}' with arguments from the 'PrivateUse1' backend.")
    args, kwargs = tree_unflatten(flat, spec)
    if flat and id(flat[0]) in swapped:  # the op's self was a plain tensor
        plain = swapped[id(flat[0])][0]
        if op is _RESIZE:
            _refuse_growth(plain, args, kwargs)
        args, kwargs = _rebase_storage_offset(op, plain, args, kwargs)
    out = op(*args, **kwargs)
    for _, r, before in swapped.values():
        if _geometry(r) != before:
            raise NotImplementedError(
                f"torch_fl: {op} changes the geometry of a tensor imported through DLPack in place, "
                "which torch_fl cannot mirror on it; apply it to x.clone() or to the ral tensor x "
                "was exported from"
            )
    return tree_map(lambda o: swapped[id(o)][0] if id(o) in swapped else o, out)


_RESIZE = torch.ops.aten.resize_.default


def _refuse_growth(plain, args, kwargs):
    """An import's storage is not resizable (DLPack memory belongs to the exporter), as on CPU
    and CUDA: refuse a resize_ that needs more bytes before it runs, because growing the RalTensor
    over the same memory would move the exporter's buffer to a new block under the import."""
    _, _, need = resized_geometry(plain, args[1], kwargs.get("memory_format"))
    if need > plain.untyped_storage().nbytes():
        raise RuntimeError("Trying to resize storage that is not resizable")  # CPU's message


def _rebase_storage_offset(op, plain, args, kwargs):
    """as_strided and kin name a storage offset in the plain tensor's storage, which starts at
    the exported view's first element: count it from the device buffer's start instead."""
    names = [a.name for a in op._schema.arguments]
    if "storage_offset" not in names:
        return args, kwargs
    i = names.index("storage_offset")
    given = args[i] if i < len(args) else kwargs.get("storage_offset")
    if given is None:  # the tensor's own offset, already rebased by as_ral
        return args, kwargs
    rebased = given + locate(plain)[1]
    if i < len(args):
        return (*args[:i], rebased, *args[i + 1 :]), kwargs
    return args, {**kwargs, "storage_offset": rebased}


def register() -> None:
    """Register the PrivateUse1 fallback once per process (at the first device-capsule export,
    tensor/dlpack.py: only then can a plain ral tensor exist)."""
    global _lib
    if _lib is None:
        _lib = torch.library.Library("_", "IMPL")
        _lib.fallback(_with_python_key(plain_fallback), "PrivateUse1")


def unregister() -> None:
    """Remove the fallback again, to be registered anew before the next export (for a process,
    such as a test run, that is done with imports and goes on to compile models)."""
    global _lib
    if _lib is not None:
        _lib._destroy()
        _lib = None
        from torch_fl.tensor import dlpack

        dlpack.BEFORE_FIRST_EXPORT.append(register)
