"""The decomp tier: a decomposition of the op into other aten ops, routed again."""

from __future__ import annotations

import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_fl.core.registry import REGISTRY
from torch_fl.tensor.layout import significant_strides
from torch_fl.tensor.op_schema import UNFAITHFUL_DECOMPOSITIONS, schema_of
from torch_fl.tiers.output_specs import in_format, suggested_format
from torch_fl.tiers.protocol import Declined
from torch_fl.tiers.rnn_cells import DEVICE_ONLY
from torch_fl.tiers.vendor import to_meta

_tls = threading.local()


def _active() -> set:
    s = getattr(_tls, "active", None)
    if s is None:
        s = _tls.active = set()
    return s


def _decompositions() -> dict:
    # Imported on first use: torch._decomp is large and most programs never need it.
    from torch._decomp import decomposition_table

    return decomposition_table


_aten = torch.ops.aten
# Ops torch._decomp leaves alone that are another op with a vendor kernel more often than not:
# a full max/min is amax/amin over every dim (same NaN rule; an empty input is refused first,
# with max()'s own message, by dispatch/argument_checks.py). HF's generate takes a full max of
# its int64 flags every token, which went to the cpu tier (a sync each).
OWN_DECOMPOSITIONS = {
    _aten.max.default: lambda x: _aten.amax.default(x),
    _aten.min.default: lambda x: _aten.amin.default(x),
}


class DecompRun:
    """Run a decomposition; a guard stops an op from decomposing into itself."""

    tier = "decomp"
    __slots__ = ("sch", "dev", "fn", "relayout")

    def __init__(self, sch, dev, fn, relayout=None):
        self.sch = sch
        self.dev = dev
        self.fn = fn
        # (memory format, outputs) where CPU's kernel lays the result out otherwise than the
        # decomposition does (max_unpool2d of a channels_last input): fixed per signature
        self.relayout = relayout

    def run(self, args, kwargs, full):
        """Execute the decomposition (its ops come back through the router)."""
        active = _active()
        func = self.sch.func
        active.add(func)
        try:
            res = self.fn(*args, **kwargs)
        finally:
            active.discard(func)
        return res if self.relayout is None else in_format(res, *self.relayout)


def build(sch, args, kwargs, full, dev, kernel_free=frozenset()):
    """A DecompRun if the op has a usable decomposition and is not already being decomposed.

    `kernel_free` holds the ops the dispatcher serves without a kernel (copies, views, ...):
    a decomposition may issue those freely.
    """
    func = sch.func
    if func in _active():
        raise Declined("already being decomposed")
    if sch.is_inplace or sch.is_out:
        raise Declined("in-place and out= ops keep exact mutation semantics on another tier")
    device_only = DEVICE_ONLY.get(func)
    if device_only is not None:  # no CPU kernel exists: this decomposition is the op here
        return DecompRun(sch, dev, device_only)
    if sch.name in UNFAITHFUL_DECOMPOSITIONS:
        raise Declined(UNFAITHFUL_DECOMPOSITIONS[sch.name])
    relayout = suggested_format(sch.name, full)
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        return DecompRun(sch, dev, func.decompose, relayout)
    fn = _decompositions().get(func) or OWN_DECOMPOSITIONS.get(func)
    if fn is None:
        raise Declined("no decomposition")
    if not _stays_on_vendor(fn, sch, args, kwargs, dev, kernel_free):
        raise Declined("the decomposition differs from the op's meta result or needs ops without vendor kernels")
    return DecompRun(sch, dev, fn, relayout)


def _signature_of(result):
    items = result if isinstance(result, (list, tuple)) else (result,)
    return [
        (tuple(t.shape), t.dtype, significant_strides(t)) if isinstance(t, torch.Tensor) else type(t) for t in items
    ]


def _stays_on_vendor(fn, sch, args, kwargs, dev, kernel_free) -> bool:
    """Trace the decomposition on meta tensors; accept it only if it gives the op's own
    output shapes, dtypes and layouts (some differ in corner cases, or return NotImplemented) and
    every op it issues is a view/alias or has a vendor kernel on this device (else one cpu
    call is cheaper)."""
    used = set()

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, f, types, a=(), kw=None):
            used.add(f)
            return f(*a, **(kw or {}))

    meta_args = [to_meta(a) for a in args]
    meta_kwargs = {k: to_meta(v) for k, v in kwargs.items()}
    try:
        with _Record():
            got = fn(*meta_args, **meta_kwargs)
        if got is NotImplemented or _signature_of(got) != _signature_of(sch.func(*meta_args, **meta_kwargs)):
            return False
    except Exception:
        return False
    for f in used:
        sch = schema_of(f)
        if f in kernel_free or sch.is_view or not sch.input_positions:
            continue  # handled without a kernel, or a factory (our PrivateUse1 kernels)
        if not REGISTRY.entries(dev, sch.name):
            return False
    return True
