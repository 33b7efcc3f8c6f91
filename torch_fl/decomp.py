"""The decomp tier: a decomposition of the op into other aten ops, routed again."""

from __future__ import annotations

import threading

import torch

_tls = threading.local()


def _active() -> set:
    s = getattr(_tls, "active", None)
    if s is None:
        s = _tls.active = set()
    return s


def _table():
    from torch._decomp import decomposition_table

    return decomposition_table


class DecompRun:
    """Run a decomposition; a guard stops an op from decomposing into itself."""

    tier = "decomp"
    __slots__ = ("sch", "dev", "fn")

    def __init__(self, sch, dev, fn):
        self.sch = sch
        self.dev = dev
        self.fn = fn

    def run(self, args, kwargs, full):
        """Execute the decomposition (its ops come back through the router)."""
        active = _active()
        func = self.sch.func
        active.add(func)
        try:
            return self.fn(*args, **kwargs)
        finally:
            active.discard(func)


# Decompositions whose results differ from PyTorch's CPU kernel in ways the meta check cannot
# see (the meta kernel agrees with the decomposition, not with CPU).
_UNFAITHFUL = {
    "aten::native_batch_norm": "in eval mode CPU returns empty save_mean/save_invstd; the decomposition returns full-size",
}


def build_decomp(sch, args, kwargs, full, dev):
    """A DecompRun if the op has a usable decomposition and is not already being decomposed."""
    func = sch.func
    if func in _active():
        return None
    if sch.is_inplace or sch.is_out or sch.name in _UNFAITHFUL:
        return None  # torch._decomp entries are functional; mutation semantics stay exact on cpu
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        return DecompRun(sch, dev, func.decompose)
    fn = _table().get(func)
    if fn is None or not _stays_on_vendor(fn, sch, args, kwargs, dev):
        return None
    return DecompRun(sch, dev, fn)


def _signature_of(result):
    items = result if isinstance(result, (list, tuple)) else (result,)
    return [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t) for t in items]


def _stays_on_vendor(fn, sch, args, kwargs, dev) -> bool:
    """Trace the decomposition on meta tensors; accept it only if it gives the op's own
    output shapes and dtypes (some differ in corner cases, or return NotImplemented) and
    every op it issues is a view/alias or has a vendor kernel on this device (else one cpu
    call is cheaper)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from .registry import REGISTRY
    from .schema import schema_of
    from .special import SPECIAL
    from .vendor import _to_meta

    used = set()

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, f, types, a=(), kw=None):
            used.add(f)
            return f(*a, **(kw or {}))

    meta_args = [_to_meta(a) for a in args]
    meta_kwargs = {k: _to_meta(v) for k, v in kwargs.items()}
    try:
        with _Record():
            got = fn(*meta_args, **meta_kwargs)
        if got is NotImplemented or _signature_of(got) != _signature_of(sch.func(*meta_args, **meta_kwargs)):
            return False
    except Exception:
        return False
    for f in used:
        sch = schema_of(f)
        if f in SPECIAL or sch.is_view or not sch.input_positions:
            continue  # handled without a kernel, or a factory (our PrivateUse1 kernels)
        if not REGISTRY.entries(dev, sch.name):
            return False
    return True
