"""KernelRouter: pick one tier per (op, signature, device), cache it, honour overrides."""

from __future__ import annotations

import os
import re
import threading

from .decomp import build_decomp
from .fallback import CpuRun
from .registry import resolve_op
from .vendor import NoVendor, build_vendor

TIERS = ("vendor", "decomp", "jit", "cpu")

_lock = threading.Lock()
# (func, signature) -> run object. Cleared on manifest reload and override changes.
DECISIONS: dict = {}
# Why the vendor tier was skipped, per (op name, device): shown by coverage tools.
VENDOR_MISS: dict = {}
_overrides: dict[str, str] = {}
_env_overrides: dict[str, str] | None = None


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
    canon = op[: -len(".default")] if op.endswith(".default") else op
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
    if tier == "vendor":
        try:
            return build_vendor(sch, args, kwargs, full, dev)
        except NoVendor as exc:
            VENDOR_MISS[(sch.name, dev)] = str(exc)
            return None
    if tier == "decomp":
        return build_decomp(sch, args, kwargs, full, dev)
    if tier == "jit":
        return JIT_BUILDER(sch, args, kwargs, full, dev) if JIT_BUILDER is not None else None
    return CpuRun(sch, dev)


# The jit tier's slot: a callable (sch, args, kwargs, full, dev) -> run object or None.
JIT_BUILDER = None


def decide(sch, args, kwargs, full, dev, key):
    """Choose and cache the run object for this call."""
    forced = override_for(sch.name)
    if forced is not None:
        run = _build(forced, sch, args, kwargs, full, dev)
        if run is None:
            from .errors import UnsupportedError

            why = VENDOR_MISS.get((sch.name, dev), "the tier cannot serve this call")
            raise UnsupportedError(
                f"RAL_ERROR_UNSUPPORTED: {sch.name} is forced to tier {forced!r} on ral:{dev}, "
                f"but that tier cannot run it ({why})",
                op=sch.name,
            )
    else:
        run = None
        for tier in TIERS:
            run = _build(tier, sch, args, kwargs, full, dev)
            if run is not None:
                break
    DECISIONS[key] = run
    return run
