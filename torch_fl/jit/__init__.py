"""The jit tier: pointwise and reduction kernels generated for the device, compiled through
its plugin, cached on disk by the plugin, and fused inside `fuse()` regions.

Importing this package fills `router.JIT_BUILDER`. `force(True)` (or TORCH_FL_JIT=force)
routes every op that has a template to jit ahead of vendor kernels, for testing.
"""

from __future__ import annotations

import os

from .. import router
from ..decomp import build_decomp
from ..fallback import CpuRun
from ..vendor import NoVendor, build_vendor
from . import kernel_cache
from .kernel_cache import STATS
from .pointwise import build_pointwise
from .reduce import REDUCTIONS, build_reduce
from .templates import TEMPLATES, template_for

_forced: list[str] = []


def _cpu_tier_is_better(dev: int) -> bool:
    """Whether to leave a host-mappable device's op to the cpu tier (PyTorch's vectorised
    kernel on zero-copy views) instead: only when generated C would call scalar libm, which
    measured 3-10x slower. With glibc's SIMD math the jit kernel is 0.3-0.9x the cpu tier's
    time (benchmarks/run.py --only jit), so jit takes its place in the chain as designed.
    TORCH_FL_JIT=always, force() or a per-op override still route to jit regardless."""
    from ..transfer import host_mappable

    if os.environ.get("TORCH_FL_JIT", "").strip() in ("always", "force"):
        return False
    return host_mappable(dev) and not kernel_cache.has_libmvec()


def build(sch, args, kwargs, full, dev):
    """router.JIT_BUILDER: a JitRun for this call, or None (the router moves on)."""
    if router.override_for(sch.name) != "jit" and _cpu_tier_is_better(dev):
        return None
    try:
        if sch.name in REDUCTIONS:
            run = build_reduce(sch, args, kwargs, full, dev)
        elif template_for(sch.func) is not None:
            run = build_pointwise(sch, args, kwargs, full, dev)
        else:
            run = None
    except Exception as exc:  # a generator bug must never cost the user the op
        kernel_cache.warn_once(dev, f"jit planning error in {sch.name}", f"{type(exc).__name__}: {exc}")
        run = None
    if run is None and router.override_for(sch.name) == "jit":
        return _next_tier(sch, args, kwargs, full, dev)
    return run


def _next_tier(sch, args, kwargs, full, dev):
    """Forced to jit but jit declined: the other tiers in order, so nothing is lost."""
    try:
        return build_vendor(sch, args, kwargs, full, dev)
    except NoVendor:
        pass
    return build_decomp(sch, args, kwargs, full, dev) or CpuRun(sch, dev)


def _variants(name: str) -> list[str]:
    """An overload name and its in-place and out= siblings that exist."""
    import torch

    base, _, ov = name.partition(".")
    short = base.split("::")[1]
    out = [name]
    packet = getattr(torch.ops.aten, short + "_", None)
    if packet is not None and (ov or "default") in packet.overloads():
        out.append(f"{base}_.{ov}" if ov else base + "_")
    packet = getattr(torch.ops.aten, short, None)
    for cand in ("out", f"{ov}_out" if ov else "out"):
        if packet is not None and cand in packet.overloads():
            o = getattr(packet, cand)
            if template_for(o) is not None or name in REDUCTIONS:
                out.append(f"{base}.{cand}")
    return list(dict.fromkeys(out))


def force(on: bool = True) -> None:
    """Route every op with a jit template (and every jit reduction) to jit first, or stop."""
    global _forced
    for name in _forced:
        router.set_op_override(name, None)
    _forced = []
    if not on:
        return
    for name in list(TEMPLATES) + list(REDUCTIONS):
        for v in _variants(name):
            try:
                router.set_op_override(v, "jit")
            except (LookupError, ValueError):
                continue
            _forced.append(v)


def forced() -> bool:
    """Whether force(True) is in effect."""
    return bool(_forced)


router.JIT_BUILDER = build
if os.environ.get("TORCH_FL_JIT", "").strip().lower() == "force":
    force(True)

from .fusion import fuse  # noqa: E402

__all__ = ["build", "force", "forced", "fuse", "STATS"]
