"""View ops: new RalTensors over the same Buffer, with metadata computed on meta tensors once."""

from __future__ import annotations

import torch

from torch_fl.tensor.op_schema import schema_of
from torch_fl.tensor.ral_tensor import RalTensor, wrap

_aten = torch.ops.aten
# (id(func), in shape, in stride, dtype, other args) -> (func, ([(shape, stride, offset delta, dtype), ...], is_seq))
_VIEW_CACHE: dict = {}


def _hashable(v):
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, torch.Tensor):
        raise TypeError("tensor argument")
    return v


def _key_args(args) -> tuple:
    """The non-tensor arguments of a view op as a hashable key (TypeError on a tensor).

    Called on every view: ints and int lists (the common case) are keyed without the
    generic recursive walk."""
    out = []
    for a in args:
        ta = type(a)
        if ta is int or a is None:
            out.append(a)
        elif ta is list and all(type(x) is int for x in a):
            out.append(tuple(a))
        else:
            out.append(_hashable(a))
    return tuple(out)


def _meta_of(t: RalTensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


# Views whose ATen kernel checks the base's storage offset (an element-size change must keep
# the offset a whole number of new elements); view_specs' meta tensors start at offset 0.
_OFFSET_CHECKED = (_aten.view.dtype, _aten.view_as_complex.default)


def _check_offset(func, base, args, kwargs) -> None:
    """Raise CPU's error where func's ATen checks refuse base's storage offset."""
    off = base.storage_offset()
    extent = 0 if base.numel() == 0 else 1 + sum((n - 1) * st for n, st in zip(base.shape, base.stride()))
    storage = torch.empty(off + extent, dtype=base.dtype, device="meta")
    func(storage.as_strided(base.shape, base.stride(), off), *args[1:], **kwargs)


def view_op(func, args, kwargs):
    """Run a view op by computing the result metadata; no kernel, memory is shared."""
    return make_views(args[0], view_specs(func, args, kwargs))


def view_specs(func, args, kwargs):
    """([(shape, stride, offset delta, dtype), ...], is_seq) of a view op's results, cached."""
    base = args[0]
    if func in _OFFSET_CHECKED and base.storage_offset():
        _check_offset(func, base, args, kwargs)
    try:
        # id(func): OpOverload.__hash__ is a Python function; the entry keeps func for an
        # identity check (the id of a dead overload may be reused).
        key = (
            id(func),
            base.shape,
            base.stride(),
            base.dtype,
            _key_args(args[1:]) if len(args) > 1 else (),
            tuple(sorted((k, _hashable(v)) for k, v in kwargs.items())) if kwargs else (),
        )
    except TypeError:
        key = None
    hit = _VIEW_CACHE.get(key) if key is not None else None
    if hit is not None and hit[0] is func:
        specs = hit[1]
    else:
        meta_args = [_meta_of(a) if isinstance(a, RalTensor) else a for a in args]
        res = func(*meta_args, **kwargs)
        outs = res if isinstance(res, (list, tuple)) else (res,)
        specs = [(tuple(o.shape), tuple(o.stride()), o.storage_offset(), o.dtype) for o in outs]
        specs = (specs, isinstance(res, (list, tuple)))
        if key is not None:
            _VIEW_CACHE[key] = (func, specs)
    return specs


def make_views(base, specs):
    """The view tensors over base's buffer that view_specs described."""
    items, is_seq = specs
    off0 = base.storage_offset()
    buf = base._buf
    itemsize = base.dtype.itemsize
    if not is_seq:
        shape, stride, off, dtype = items[0]
        offset = off + _rescaled(base, off0, dtype) if dtype.itemsize != itemsize else off + off0
        return wrap(buf, shape, stride, offset, dtype)
    made = []
    for shape, stride, off, dtype in items:
        offset = off + _rescaled(base, off0, dtype) if dtype.itemsize != itemsize else off + off0
        made.append(wrap(buf, shape, stride, offset, dtype))
    return made


def _rescaled(base, off0: int, dtype) -> int:
    """base's element offset in elements of a dtype-changing view."""
    scaled, rest = divmod(off0 * base.dtype.itemsize, dtype.itemsize)
    if rest:  # a floored offset would read the wrong elements; view_specs raises CPU's error first
        raise RuntimeError(
            f"torch_fl: a {dtype} view of a {base.dtype} tensor at storage offset {off0} is not aligned to its elements"
        )
    return scaled


def cached_view_call(func, base, specs, geometry_sig):
    """A function (args, kwargs, full) -> the view(s) of a later call with base's argument
    signature, or None (as_strided sets an absolute offset; a dtype-changing view rescales
    it). The dispatcher caches it per signature. The signature holds a strided tensor's
    strides, and a contiguous one's follow from its shape unless some dim has size <= 1
    (whose stride is free: batch-1 decoding is all such dims); for those bases the call
    compares the base's strides with `base`'s and takes the general path when they differ.
    Each result carries its routing signature, geometry_sig(dev, shape, stride, dtype), so
    its next op need not compute it."""
    items, is_seq = specs
    itemsize = base.dtype.itemsize
    if func is _aten.as_strided.default or any(it[3].itemsize != itemsize for it in items):
        return None
    stride0 = base.stride() if base.is_contiguous() and any(n <= 1 for n in base.shape) else None
    dev = base._dev
    device = base.device
    make = torch.Tensor._make_wrapper_subclass
    results = [
        (shape, stride, off, dtype, geometry_sig(dev, shape, stride, dtype)) for shape, stride, off, dtype in items
    ]

    if not is_seq:
        ((shape, stride, off, dtype, sig),) = results

        def cached_view(args, kwargs, full):
            b = args[0]
            if stride0 is not None and b.stride() != stride0:
                return view_op(func, args, kwargs)
            t = make(RalTensor, shape, stride, off + b.storage_offset(), None, dtype, _STRIDED, device)
            t._buf = b._buf
            t._dev = dev
            t._sig = sig
            return t

        return cached_view

    def cached_views(args, kwargs, full):
        b = args[0]
        if stride0 is not None and b.stride() != stride0:
            return view_op(func, args, kwargs)
        off0, buf = b.storage_offset(), b._buf
        made = []
        for shape, stride, off, dtype, sig in results:
            t = make(RalTensor, shape, stride, off + off0, None, dtype, _STRIDED, device)
            t._buf = buf
            t._dev = dev
            t._sig = sig
            made.append(t)
        return made

    return cached_views


_STRIDED = torch.strided


def as_strided(func, args, kwargs):
    """as_strided sets an absolute storage offset (default: keep the input's)."""
    sch = schema_of(func)
    full = sch.normalize(args, kwargs)
    base, size, stride, offset = full[0], full[1], full[2], full[3]
    if offset is None:
        offset = base.storage_offset()
    check_as_strided(base, tuple(size), tuple(stride), offset)
    return wrap(base._buf, tuple(size), tuple(stride), offset, base.dtype)


def check_as_strided(base, size, stride, offset) -> None:
    """Raise like CPU for negative strides or offsets, bad sizes, or a view past the storage."""
    torch.empty(0, dtype=base.dtype, device="meta").as_strided(size, stride, offset)
    if any(n == 0 for n in size):
        return
    need = (offset + 1 + sum((n - 1) * st for n, st in zip(size, stride))) * base.dtype.itemsize
    if need > base._buf.nbytes:
        raise RuntimeError(
            f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, "
            f"and itemsize {base.dtype.itemsize} requiring a storage size of {need} are out of "
            f"bounds for storage of size {base._buf.nbytes}"
        )


def alias(func, args, kwargs):
    """detach / alias / lift_fresh_copy-free aliases: same metadata, shared buffer, no kernel."""
    t = args[0]
    return wrap(t._buf, t.shape, t.stride(), t.storage_offset(), t.dtype)
