"""Ops on lazy conjugate and negative views (tensor/math_views.py), with PyTorch's meaning.

PyTorch's Conjugate and Negative fallbacks resolve the bits before `__torch_dispatch__`
for most ops (a clone of each such input; an in-place op runs on the clone and copies back).
Views, `copy_`, `clone`, `resolve_conj`/`resolve_neg`, `conj_physical` and the BLAS family
(mm, addmm, bmm, baddbmm, dot, vdot, linalg_svd, linalg_solve_triangular) fall through and
reach torch_fl with the bits set; so do calls torch_fl makes itself. `run` gives each its
meaning: views keep or toggle the bits, `copy_` writes conjugated or negated values through a
view into its base's memory, `clone` and the resolves return the values, and every other op
runs on resolved copies, as the fallbacks would have run it.
"""

from __future__ import annotations

import torch

from torch_fl.dispatch.special import SPECIAL, special
from torch_fl.tensor.math_views import RalMathView, bits_of, meta_twin, plain, with_bits
from torch_fl.tensor.op_schema import schema_of
from torch_fl.tensor.ral_tensor import RalTensor

aten = torch.ops.aten
_SEQ = (list, tuple)
# In-place geometry changes (their special handlers restride the tensor object itself, which
# keeps its bits): the bits are untouched, as on CPU.
_GEOMETRY_IN_PLACE = frozenset(
    {
        "as_strided_",
        "resize_",
        "set_",
        "squeeze_",
        "unsqueeze_",
        "t_",
        "transpose_",
        "swapdims_",
        "swapaxes_",
        "detach_",
    }
)
# Ops that read only their inputs' geometry and dtype: run on the bit-free alias (the
# result of each carries no bits, as ATen's empty_like clears them).
_GEOMETRY_ONLY = frozenset(
    {
        aten.empty_like.default,
        aten.full_like.default,
        aten.zeros_like.default,
        aten.ones_like.default,
        aten.new_empty.default,
        aten.new_empty_strided.default,
        aten.new_zeros.default,
        aten.new_ones.default,
        aten.new_full.default,
        aten._has_same_storage_numel.default,
        aten._new_zeros_with_same_feature_meta.default,
        aten.is_same_size.default,
    }
)


def has_math_view(args, kwargs) -> bool:
    """Whether a RalMathView is among an op's arguments (top level or in a tensor list).
    Asked before every special handler off the fast cache: plain loops, no generators."""
    return _holds_math_view(args) or (bool(kwargs) and _holds_math_view(kwargs.values()))


def _holds_math_view(values) -> bool:
    for a in values:
        ta = type(a)
        if ta is RalMathView:
            return True
        if ta is list or ta is tuple:
            for x in a:
                if type(x) is RalMathView:
                    return True
    return False


def run(func, args, kwargs):
    """Run func, some of whose arguments are conjugate or negative views, as PyTorch would."""
    handler = _HANDLERS.get(func)
    if handler is not None:
        return handler(func, args, kwargs)
    if func in _GEOMETRY_ONLY:
        return _call_mapped(func, args, kwargs, plain)
    sch = schema_of(func)
    if sch.is_inplace and func._schema.name.split("::")[1] in _GEOMETRY_IN_PLACE and func in SPECIAL:
        return SPECIAL[func](func, args, kwargs)
    if sch.is_view:
        return _view(func, sch, args, kwargs)
    return _on_resolved(func, sch, args, kwargs)


def resolved(t: RalTensor) -> RalTensor:
    """A new bit-free tensor holding t's values (its meaning, not its stored bits)."""
    return _clone(aten.clone.default, (t,), {})


def _map_view(v, fn):
    if type(v) is RalMathView:
        return fn(v)
    if type(v) in _SEQ and any(type(x) is RalMathView for x in v):
        return type(v)(fn(x) if type(x) is RalMathView else x for x in v)
    return v


def _call_mapped(func, args, kwargs, fn):
    """func with fn applied to every RalMathView among its arguments (lists included)."""
    return func(*[_map_view(a, fn) for a in args], **{k: _map_view(v, fn) for k, v in kwargs.items()})


def _view(func, sch, args, kwargs):
    """A view of a conjugate or negative view: ATen's meta kernel on a meta tensor with the
    same bits decides the result's bits (and raises where ATen refuses, as view_as_real or a
    dtype-changing view of a conjugate view); the geometry comes from the bit-free view."""
    if sch.composite_implicit:
        return func.decompose(*args, **kwargs)
    metas = _call_mapped(func, args, kwargs, meta_twin)
    views = _call_mapped(func, args, kwargs, plain)
    if isinstance(views, _SEQ):
        return type(views)(_with_bits_of(v, m) for v, m in zip(views, metas))
    return _with_bits_of(views, metas)


def _with_bits_of(view: RalTensor, meta: torch.Tensor) -> RalTensor:
    conj, neg = bits_of(meta)
    return with_bits(view, conj, neg) if conj or neg else view


def _on_resolved(func, sch, args, kwargs):
    """func on resolved copies of its conjugate and negative views; a mutated one gets the
    result copied back through its bits (PyTorch's MathOpFallback)."""
    mutated = sch.mutated_positions
    names = sch.names
    written = []

    def resolve(i, v):
        if type(v) is RalMathView:
            r = resolved(v)
            if i in mutated:
                written.append((v, r))
            return r
        if i in mutated and type(v) in _SEQ and any(type(x) is RalMathView for x in v):
            raise RuntimeError(
                f"{func._schema.name}: a mutable tensor list holds conjugate or negative views; "
                "resolve them (resolve_conj(), resolve_neg()) first"
            )
        return _map_view(v, resolved)

    new_args = [resolve(i, a) for i, a in enumerate(args)]
    new_kwargs = {k: resolve(names.index(k), v) for k, v in kwargs.items()}
    if len(written) > 1:
        raise RuntimeError(
            f"{func._schema.name}: more than one mutable argument is a conjugate or negative view; "
            "resolve them (resolve_conj(), resolve_neg()) first"
        )
    out = func(*new_args, **new_kwargs)
    for target, copy in written:
        if target.shape != copy.shape:
            aten.resize_.default(target, copy.shape)
        _copy_(aten.copy_.default, (target, copy), {})
        out = _put_back(out, copy, target)
    return out


def _put_back(out, copy, target):
    """out with the resolved copy of a mutated argument replaced by the argument itself."""
    if out is copy:
        return target
    if isinstance(out, _SEQ):
        return type(out)(target if o is copy else o for o in out)
    return out


_HANDLERS: dict = {}


def _handles(*ops):
    def register(fn):
        for op in ops:
            _HANDLERS[op] = fn
        return fn

    return register


@special(aten._conj.default)
@_handles(aten._conj.default)
def _conj(func, args, kwargs):
    """x.conj() of a complex tensor: a view with the conjugate bit flipped."""
    t = args[0]
    if not t.dtype.is_complex:
        func(meta_twin(t))  # ATen's assertion on a real tensor
    conj, neg = bits_of(t)
    return with_bits(t, not conj, neg)


@special(aten._neg_view.default)
@_handles(aten._neg_view.default)
def _neg_view(func, args, kwargs):
    """A view with the negative bit flipped (`x.conj().imag` makes one)."""
    t = args[0]
    conj, neg = bits_of(t)
    return with_bits(t, conj, not neg)


@_handles(aten.copy_.default)
def _copy_(func, args, kwargs):
    """dst.copy_(src): dst's meaning becomes src's, so dst's memory receives src's values
    conjugated and negated as dst's own bits say (a CPU dst's bits are CPU's copy_'s)."""
    dst, src = args[0], args[1]
    non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    if type(src) is RalMathView:
        src_conj, src_neg = bits_of(src)
        value = plain(src)
    else:
        src_conj = src_neg = False
        value = src.resolve_conj().resolve_neg() if src.device.type == "cpu" else src
    if type(dst) is RalMathView:
        dst_conj, dst_neg = bits_of(dst)
        target = plain(dst)
    else:
        dst_conj = dst_neg = False
        target = dst
    if src_conj != dst_conj:
        value = aten.conj_physical.default(value)
    if src_neg != dst_neg:
        value = aten.neg.default(value)
    aten.copy_.default(target, value, non_blocking)
    return dst


@_handles(aten.clone.default)
def _clone(func, args, kwargs):
    """A new tensor with t's values and no bits (ATen's clone resolves them)."""
    t = args[0]
    fmt = args[1] if len(args) > 1 else kwargs.get("memory_format")
    out = aten.clone.default(plain(t), memory_format=fmt)
    conj, neg = bits_of(t)
    if conj:
        aten.conj_physical_.default(out)
    if neg:
        aten.neg_.default(out)
    return out


@_handles(aten.resolve_conj.default)
def _resolve_conj(func, args, kwargs):
    """t itself without the conjugate bit; else a resolved copy (ATen's clears both bits)."""
    t = args[0]
    return resolved(t) if t.is_conj() else t


@_handles(aten.resolve_neg.default)
def _resolve_neg(func, args, kwargs):
    """t itself without the negative bit; else a resolved copy."""
    t = args[0]
    return resolved(t) if t.is_neg() else t
