"""The jit tier: pointwise and reduction kernels generated for the device, compiled through
its plugin, cached on disk by the plugin, and fused inside `fuse()` regions.

Importing this package registers the jit tier's builder with the router. `force(True)` (or
TORCH_FL_JIT=force) routes every op that has a template to jit ahead of vendor kernels, for testing.
"""

from __future__ import annotations

import os

import torch

from torch_fl.dispatch import router
from torch_fl.jit import kernel_cache
from torch_fl.jit.kernel_cache import STATS
from torch_fl.jit.pointwise import build_pointwise
from torch_fl.jit.reduce import REDUCTIONS, build_reduce
from torch_fl.jit.templates import TEMPLATES, template_for
from torch_fl.tensor.host_copy import host_mappable
from torch_fl.tensor.ral_tensor import FIRST_TRACE_HOOKS
from torch_fl.tiers.protocol import Declined

_forced: list[str] = []


def _cpu_tier_is_better(dev: int) -> bool:
    """Whether to leave a host-mappable device's op to the cpu tier (PyTorch's vectorised
    kernel on zero-copy views) instead: only when generated C would call scalar libm, which
    measured 3-10x slower. With glibc's SIMD math the jit kernel is 0.3-0.9x the cpu tier's
    time (benchmarks/run.py --only jit), so jit takes its place in the chain as designed.
    TORCH_FL_JIT=always, force() or a per-op override still route to jit regardless."""
    if os.environ.get("TORCH_FL_JIT", "").strip() in ("always", "force"):
        return False
    return host_mappable(dev) and not kernel_cache.has_libmvec()


def build(sch, args, kwargs, full, dev):
    """The jit tier's builder: a JitRun for this call, or Declined (the router moves on)."""
    if router.override_for(sch.name) != "jit" and _cpu_tier_is_better(dev):
        raise Declined("the cpu tier is faster here (no SIMD math library for generated C)")
    try:
        if sch.name in REDUCTIONS:
            run = build_reduce(sch, args, kwargs, full, dev)
        elif template_for(sch.func) is not None:
            run = build_pointwise(sch, args, kwargs, full, dev)
        else:
            run = None
    except Exception as exc:  # a generator bug must never cost the user the op
        kernel_cache.warn_once(dev, f"jit planning error in {sch.name}", f"{type(exc).__name__}: {exc}")
        raise Declined(f"planning error: {type(exc).__name__}: {exc}") from None
    if run is None:
        raise Declined("no template, or the generator or compiler declined this call")
    return run


def _variants(name: str) -> list[str]:
    """An overload name and its in-place and out= siblings that exist."""
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


def _register_inductor() -> None:
    """Let the default compile backend (inductor) generate host C++ for ral tensors."""
    from torch_fl.jit import inductor_device

    try:
        inductor_device.register()
    except ImportError as exc:  # a torch without inductor: the other backends still work
        import warnings

        warnings.warn(f"torch_fl: inductor cannot be registered for ral tensors ({exc})", RuntimeWarning, stacklevel=2)


router.register_tier("jit", build)
FIRST_TRACE_HOOKS.append(_register_inductor)
if os.environ.get("TORCH_FL_JIT", "").strip().lower() == "force":
    force(True)

from torch_fl.jit.fusion import fuse  # noqa: E402

if os.environ.get("TORCH_FL_ADAM_KERNEL", "1") != "0":  # 0: PyTorch's own per-op Adam loop
    from torch_fl.jit import adam_step

    adam_step.install()

__all__ = ["build", "force", "forced", "fuse", "STATS"]
