"""Entry point of every aten op on a RalTensor: special handlers, else the router."""

from __future__ import annotations

import time

import torch

from torch_fl.core.errors import UnsupportedError
from torch_fl.device import fork
from torch_fl.dispatch import math_bits, router
from torch_fl.dispatch.special import ON_REGISTER, ROUTE, SPECIAL
from torch_fl.tensor.dlpack_import import plain_fallback
from torch_fl.tensor.op_schema import NON_TENSOR, TENSOR_LIST, schema_of
from torch_fl.tensor.ral_tensor import MathViewFound, RalMathView, RalTensor, set_dispatcher, tensor_sig
from torch_fl.tensor.views import cached_view_call, make_views, view_op, view_specs

_SCHEMAS = {}
_DECISIONS = router.DECISIONS
has_math_view = math_bits.has_math_view
# id(func) -> (func, special handler or None, schema or None). OpOverload.__hash__ is a
# Python function; a dict keyed by id plus an identity check (ids of dead overloads can be
# reused) costs one C-level lookup per op instead of three Python hash calls.
_BY_ID: dict = {}
ON_REGISTER.append(_BY_ID.clear)  # a special handler registered later must be seen
# Positional fast cache: (id(func), per-argument keys...) -> (func, run callable, default tail).
# Most calls pass only positional RalTensors and plain values; their key is built straight
# from the arguments (a RalTensor's cached `_sig`, a value's type and value), which skips
# the schema walk of normalize + signature. Every value of the call is in the key, so it is
# at least as specific as the router's key and maps to the same run. Derived from
# DECISIONS: cleared with it (router._Decisions) and when a special handler is registered.
_FAST: dict = {}
_FAST_MAX = 8192
ON_REGISTER.append(_FAST.clear)
router.DECISIONS.on_clear.append(_FAST.clear)
# The default dtype is an input of every call that promotes integers with a float (int / int,
# int + 1.5): the decisions were made under _DEFAULT_DTYPE[0] and are dropped when it changes.
_DEFAULT_DTYPE = [torch.get_default_dtype()]
_get_default_dtype = torch.get_default_dtype
# Observers (coverage, trace): callables (op_name, tier, dev, t0, t1, args). Empty = no cost.
OBSERVERS: list = []


def _device_error(a: str, b: str) -> RuntimeError:
    # Same wording and type as PyTorch's own CUDA/CPU mismatch error.
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")


class MathViewArgument(Exception):
    """A lazy conjugate or negative view among a routed op's arguments: dispatch() runs the op
    through math_bits (raised by signature(), before any side effect)."""


class PlainRalArgument(RuntimeError):
    """A plain (storage-backed) ral tensor among an op's arguments: torch.from_dlpack's result
    reaching torch_fl inside a PyTorch composite kernel. dispatch() reruns the op on RalTensors."""


def signature(sch, full):
    """(device, hashable key) of a call: shapes/dtypes/layout and shape-relevant values."""
    dev = -1
    key = [sch]  # the schema stands for its op: identity hash, one schema per overload
    kinds = sch.kinds
    value_free = sch.value_free
    for i, v in enumerate(full):
        k = kinds[i]
        if k == NON_TENSOR:
            if value_free[i]:
                key.append(type(v))
            elif type(v) is list:
                key.append(tuple(v))
            else:
                key.append(v)
            continue
        items = v if k == TENSOR_LIST else (v,)
        if k == TENSOR_LIST:
            key.append(len(v))
        for t in items:
            if t is None:
                key.append(None)
            elif type(t) is RalTensor:
                # Contiguous: True; strided: the strides themselves, so a cached plan may
                # bake them (tiers/vendor.py _compile_fast).
                sig = t._sig or tensor_sig(t)
                d = sig[0]
                if dev != d:
                    if dev >= 0:
                        raise _device_error(f"ral:{dev}", f"ral:{d}")
                    dev = d
                key.append(sig)
            elif isinstance(t, torch.Tensor):
                if type(t) is RalMathView:
                    raise MathViewArgument(sch.name)
                if t.layout != torch.strided:
                    raise UnsupportedError(
                        f"RAL_ERROR_UNSUPPORTED: {sch.name}: {t.layout} tensors are not supported on ral devices; "
                        "convert with .to_dense() first",
                        op=sch.name,
                    )
                # A 0-dim CPU tensor is a scalar operand, but never the tensor an op writes
                # (out=, in-place self): CUDA refuses those, whatever their size.
                if t.dim() != 0 or t.device.type != "cpu" or i in sch.out_positions or i in sch.mutated_positions:
                    if t.device.type == "ral":
                        raise PlainRalArgument(sch.name)
                    raise _device_error("ral", str(t.device))
                key.append(("cpu0", t.dtype))
            else:  # a wrapped Python number in a Tensor slot: its type drives promotion
                key.append(type(t))
    return dev, tuple(key)


def _info(func):
    """(func, special handler, schema or None) of an op, cached by id."""
    special = SPECIAL.get(func)
    sch = None
    if special is None:
        sch = _SCHEMAS.get(func)
        if sch is None:
            sch = _SCHEMAS[func] = schema_of(func)
    info = _BY_ID[id(func)] = (func, special, sch)
    return info


def _fast_key(func, args):
    """The positional fast-cache key of a call, or None when some argument has no cheap key
    (a CPU tensor, a tensor list with anything but RalTensors, a nested value, an unlisted
    type)."""
    key = [id(func)]
    seen = False
    for a in args:
        ta = type(a)
        if ta is RalTensor:
            key.append(a._sig or tensor_sig(a))
            seen = True
        elif ta is int or ta is float or ta is bool:
            key.append(ta)  # 1, 1.0 and True hash alike but mean different things
            key.append(a)
        elif a is None:
            key.append(None)
        elif ta is list:
            if a and type(a[0]) is RalTensor:
                # a tensor list (cat, stack): every element a RalTensor, keyed by its
                # signature as the router's key does (length included)
                sigs = []
                for x in a:
                    if type(x) is not RalTensor:
                        return None
                    sigs.append(x._sig or tensor_sig(x))
                key.append(RalTensor)
                key.append(tuple(sigs))
                seen = True
                continue
            for x in a:
                if type(x) is not int:
                    return None
            key.append(list)
            key.append(tuple(a))
        elif ta is torch.dtype or ta is torch.memory_format or ta is torch.layout:
            key.append(a)
        else:
            return None
    return tuple(key) if seen else None


def dispatch(func, args, kwargs):
    """Run one aten op whose arguments include RalTensors."""
    if _get_default_dtype() is not _DEFAULT_DTYPE[0]:
        _default_dtype_changed()
    try:
        if not kwargs and not OBSERVERS:
            fkey = _fast_key(func, args)
            if fkey is not None:
                hit = _FAST.get(fkey)
                if hit is not None and hit[0] is func:
                    return hit[1](args, kwargs, [*args, *hit[2]])
                return _dispatch_slow(func, args, kwargs, fkey)
        try:
            return _dispatch_slow(func, args, kwargs, None)
        except PlainRalArgument:  # before any side effect: signature() runs first in _route
            return plain_fallback(func, *args, **kwargs)
    except MathViewFound:  # an argument is a RalMathView now: its type keeps it off the fast paths
        return dispatch(func, args, kwargs)
    except MathViewArgument:
        return math_bits.run(func, args, kwargs)


def _default_dtype_changed() -> None:
    """Forget the decisions (and the fast cache) made under the previous default dtype."""
    _DEFAULT_DTYPE[0] = _get_default_dtype()
    router.invalidate()


def _dispatch_slow(func, args, kwargs, fkey):
    info = _BY_ID.get(id(func))
    if info is None or info[0] is not func:
        info = _info(func)
    special = info[1]
    if special is not None:
        # A conjugate or negative view never has a fast key (its type is not RalTensor); the
        # router's signature() and _route's view branch catch it on the other paths.
        if fkey is None and has_math_view(args, kwargs):
            return math_bits.run(func, args, kwargs)
        out = special(func, args, kwargs)
        if out is not ROUTE:
            return out
        # A handler that routes by what the fast key holds (dtypes, shapes, int lists) would
        # route every later call with this key too: the fast cache may skip it.
        return route(func, args, kwargs, fkey if getattr(special, "routes_by_signature", False) else None)
    return _route(func, info[2], args, kwargs, fkey)


def route(func, args, kwargs, fkey=None):
    """Send a (non-special) op through the router: vendor, decomp, jit or cpu."""
    sch = _SCHEMAS.get(func)
    if sch is None:
        sch = _SCHEMAS[func] = schema_of(func)
    return _route(func, sch, args, kwargs, fkey)


def _fast_put(fkey, entry) -> None:
    if len(_FAST) >= _FAST_MAX:
        _FAST.clear()
    _FAST[fkey] = entry


def _view_call(func):
    def call(args, kwargs, full):
        return view_op(func, args, kwargs)

    return call


def _geometry_sig(dev, shape, stride, dtype) -> tuple:
    """The routing signature tensor_sig gives a RalTensor of this geometry (torch's
    is_contiguous: size-1 and empty dims ignored)."""
    contiguous = torch.empty_strided(shape, stride, device="meta").is_contiguous()
    return (dev, tuple(shape), dtype, True if contiguous else stride)


def _route(func, sch, args, kwargs, fkey=None):
    if sch.is_view:
        if sch.composite_implicit:
            return func.decompose(*args, **kwargs)
        if type(args[0]) is RalMathView:
            return math_bits.run(func, args, kwargs)
        specs = view_specs(func, args, kwargs)
        if fkey is not None:
            # Within one argument signature the result geometry is fixed by the base's
            # strides (cached_view_call checks them where the signature does not hold them);
            # otherwise the view cache decides.
            call = cached_view_call(func, args[0], specs, _geometry_sig) or _view_call(func)
            _fast_put(fkey, (func, call, ()))
        return make_views(args[0], specs)
    full = sch.normalize(args, kwargs)
    dev, key = signature(sch, full)
    if dev < 0:
        raise RuntimeError(f"torch_fl: {sch.name} reached the ral backend with no ral tensor argument")
    run = _DECISIONS.get(key)
    if not OBSERVERS:
        if run is None:
            run = router.decide(sch, args, kwargs, full, dev, key)
        if fkey is not None:
            _fast_put(fkey, (func, getattr(run, "fast_call", None) or run.run, tuple(full[len(args) :])))
        return run.run(args, kwargs, full)
    t0 = time.perf_counter()  # observed: first-call routing cost is part of the op's time
    if run is None:
        run = router.decide(sch, args, kwargs, full, dev, key)
    try:
        return run.run(args, kwargs, full)
    finally:
        t1 = time.perf_counter()
        for obs in OBSERVERS:
            obs(sch.name, run.tier, dev, t0, t1, full)


def _refuse_in_forked_child(func, args, kwargs):
    fork.refuse(f"{func} on a ral tensor inherited from the parent")


set_dispatcher(dispatch)
fork.on_fork_child(lambda: set_dispatcher(_refuse_in_forked_child))
