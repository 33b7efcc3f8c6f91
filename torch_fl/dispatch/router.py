"""KernelRouter: pick one tier per (op, signature, device), cache it, honour overrides.

The router alone owns the fallback chain: it asks each tier's builder in order (TIERS) and
takes the first run it gets. A forced tier (set_op_override, TORCH_FL_OP_<op>) is asked
first; if it declines, the router says so once and goes on with the rest of the chain, so a
forced tier never costs the user the op.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from functools import partial

from torch_fl.core.registry import canonical_op
from torch_fl.dispatch.argument_checks import check_arguments
from torch_fl.dispatch.overlap import with_checks
from torch_fl.dispatch.shape_checks import cpu_broadcast_error
from torch_fl.dispatch.special import SPECIAL
from torch_fl.tensor.op_schema import resolve_op
from torch_fl.tiers import cpu, decomp, vendor
from torch_fl.tiers.protocol import Declined

TIERS = ("vendor", "decomp", "jit", "cpu")

_lock = threading.Lock()


class _Decisions(dict):
    """The decision cache; clearing it also clears every cache derived from it (the
    dispatcher's positional fast cache in dispatch/entry.py), whoever clears it."""

    __slots__ = ()
    on_clear: list = []

    def clear(self):
        """Forget every decision and every cache built on them."""
        super().clear()
        for fn in self.on_clear:
            fn()

    def __delitem__(self, key):
        super().__delitem__(key)
        for fn in self.on_clear:
            fn()

    def popitem(self):
        """dict.popitem, then the derived caches are cleared."""
        out = super().popitem()
        for fn in self.on_clear:
            fn()
        return out

    def pop(self, *args):
        """dict.pop, then the derived caches are cleared."""
        out = super().pop(*args)
        for fn in self.on_clear:
            fn()
        return out


# (func, signature) -> run object. Cleared on manifest reload and override changes.
DECISIONS: dict = _Decisions()
# Why the vendor tier was skipped, per (op name, device): shown by coverage tools.
VENDOR_MISS: dict = {}
# tier name -> builder (tiers/protocol.py). The jit package registers "jit" when imported.
BUILDERS: dict = {
    "vendor": vendor.build,
    "decomp": partial(decomp.build, kernel_free=frozenset(SPECIAL)),
    "cpu": cpu.build,
}
_overrides: dict[str, str] = {}
_env_overrides: dict[str, str] | None = None
_warned: set = set()


def register_tier(name: str, builder) -> None:
    """Give the router the builder of a tier in TIERS (the jit package's entry)."""
    if name not in TIERS:
        raise ValueError(f"unknown tier {name!r}; tiers are {', '.join(TIERS)}")
    BUILDERS[name] = builder
    invalidate()


def _env_key(op: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", op)


def _load_env_overrides() -> dict[str, str]:
    """TORCH_FL_OP_<overload>=tier, with <overload> like aten_add_Tensor (or add_Tensor)."""
    out = {}
    for key, value in os.environ.items():
        if key.startswith("TORCH_FL_OP_"):
            tier = value.strip().lower()
            if tier not in TIERS:
                raise ValueError(f"{key}={value!r}: tier must be one of {', '.join(TIERS)}")
            name = key[len("TORCH_FL_OP_") :]
            out[name] = tier
            if not name.startswith("aten_"):
                out["aten_" + name] = tier
    return out


def override_for(op: str) -> str | None:
    """The forced tier of an op (API first, then environment), or None."""
    global _env_overrides
    if op in _overrides:
        return _overrides[op]
    if _env_overrides is None:
        _env_overrides = _load_env_overrides()
    return _env_overrides.get(_env_key(op)) if _env_overrides else None


def set_op_override(op: str, tier: str | None) -> None:
    """Force one aten overload ('aten::add.Tensor') to a tier, or clear it with None."""
    if tier is not None and tier not in TIERS:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    resolve_op(op)  # raises LookupError for unknown names
    canon = canonical_op(op)
    with _lock:
        if tier is None:
            _overrides.pop(canon, None)
        else:
            _overrides[canon] = tier
        invalidate()


def clear_op_overrides() -> None:
    """Drop every API override and re-read the environment ones."""
    global _env_overrides
    with _lock:
        _overrides.clear()
        _env_overrides = None
        invalidate()


def invalidate() -> None:
    """Forget every cached decision (after a manifest reload or an override change)."""
    DECISIONS.clear()
    VENDOR_MISS.clear()


def _build(tier, sch, args, kwargs, full, dev):
    """The tier's run for this call, or None with the reason recorded."""
    builder = BUILDERS.get(tier)
    if builder is None:
        return None, "tier not installed"
    try:
        return builder(sch, args, kwargs, full, dev), None
    except Declined as exc:
        if tier == "vendor":
            VENDOR_MISS[(sch.name, dev)] = str(exc)
        return None, str(exc)


def _warn_forced_declined(op: str, tier: str, dev: int, why: str) -> None:
    key = (op, tier, dev)
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"torch_fl router: {op} is forced to tier {tier!r} on ral:{dev}, but that tier cannot run "
        f"this call ({why}); the rest of the chain serves it",
        stacklevel=4,
    )


def decide(sch, args, kwargs, full, dev, key):
    """Choose and cache the run object for this call."""
    check_arguments(sch.name, full)
    try:
        return _decide(sch, args, kwargs, full, dev, key)
    except RuntimeError as exc:
        err = cpu_broadcast_error(exc, sch, full)
        if err is exc:
            raise
        raise err from None


def _decide(sch, args, kwargs, full, dev, key):
    forced = override_for(sch.name)
    order = TIERS
    run = None
    if forced is not None:
        run, why = _build(forced, sch, args, kwargs, full, dev)
        if run is None:
            _warn_forced_declined(sch.name, forced, dev, why)
            order = tuple(t for t in TIERS if t != forced)
    if run is None:
        for tier in order:
            run, _ = _build(tier, sch, args, kwargs, full, dev)
            if run is not None:
                break
    run = with_checks(run, sch)
    DECISIONS[key] = run
    return run
