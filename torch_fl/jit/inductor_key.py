"""What inductor's FX graph cache (and AOT autograd's cache, which builds on its key) must know
about torch_fl: everything that changes the code a compile of ral tensors produces.

Inductor hashes a registered device pass's `uuid()` into every cache key
(`torch._inductor.codecache.FxGraphHashDetails.custom_backend_passes`); `inductor_device`
registers a pass for "ral" whose `uuid()` is `digest()`. Its components:
- `CODEGEN_VERSION`: bumped by hand when generated code changes in a way the sources below
  do not show;
- the jit sources (`torch_fl/jit/*.py`: the wrapper, the graph rewrite, the fused kernels'
  templates and generators) and the native headers generated C includes;
- each visible device: its plugin's name, version and ABI, the device's name, driver version,
  dtype mask and whether its memory is host-mappable (the device kind: host C++ or the extern
  graph call);
- `TORCH_FL_INDUCTOR_ASYNC` (whether the wrapper launches C++ kernels on the stream);
- `TORCH_FL_INDUCTOR_ASYNC_CHECKED` (whether kernels with bounds checks are launched too, guarded);
- `TORCH_FL_INDUCTOR_FAST_MATH` (whether C++ kernels take ral_fastmath.h's vector tanh);
- `TORCH_FL_CAUSAL_MASK` (whether the joint-graph pass rewrites constant causal masks).
"""

from __future__ import annotations

import functools
import hashlib
import os

CODEGEN_VERSION = 1


@functools.cache
def source_digest() -> str:
    """A hash of the jit package's Python sources and the headers its C kernels include."""
    from torch_fl.jit.kernel_cache import headers_digest

    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    h.update(headers_digest().encode())
    return h.hexdigest()[:16]


def devices() -> tuple:
    """(index, plugin name, plugin version, ABI, device name, driver, dtype mask, host-mappable)
    of every visible ral device."""
    from torch_fl.core.runtime import device_records, plugin_records

    plugins = plugin_records()
    out = []
    for d in device_records():
        p = plugins[d.plugin] if 0 <= d.plugin < len(plugins) else None
        out.append(
            (
                d.index,
                p.name if p else "?",
                p.version if p else "?",
                p.abi if p else (),
                d.name,
                d.driver_version,
                d.dtype_mask,
                d.host_mappable,
            )
        )
    return tuple(out)


def components() -> dict:
    """Every input of the key, by name (what `digest()` hashes)."""
    from torch_fl.jit import causal_mask, inductor_math
    from torch_fl.jit.inductor_async import checked_enabled, enabled

    return {
        "codegen_version": CODEGEN_VERSION,
        "sources": source_digest(),
        "devices": devices(),
        "inductor_async": enabled(),  # TORCH_FL_INDUCTOR_ASYNC changes the wrapper's kernel calls
        "inductor_async_checked": checked_enabled(),  # TORCH_FL_INDUCTOR_ASYNC_CHECKED: guarded kernels
        "inductor_fast_math": inductor_math.enabled(),  # TORCH_FL_INDUCTOR_FAST_MATH: the kernels' tanh
        "causal_mask": causal_mask.enabled(),  # TORCH_FL_CAUSAL_MASK: constant causal masks as is_causal
    }


def digest() -> str:
    """The key component inductor hashes for torch_fl."""
    return hashlib.sha256(repr(sorted(components().items())).encode()).hexdigest()
