"""Compile generated source through the device plugin, once per (device, source) per process.

The disk cache lives in the plugins' compile entries (keyed by a hash of the source and
options), so a second process gets its kernels without running a compiler. Failures are
warned about once per (device, reason) and remembered, so the router can move on.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import threading
import time
import warnings

from torch_fl._native import ffi, lib
from torch_fl.jit.target import Target, include_dir

_lock = threading.Lock()
_handles: dict = {}  # (dev, source hash) -> handle, or None after a failure
_warned: set = set()
_by_key: dict = {}  # (dev, caller's key) -> handle, for kernels whose source is costly to rebuild
# Counters for tests and benchmarks: compiles that reached the plugin, and their time.
STATS = {"compiles": 0, "compile_s": 0.0, "failures": 0, "hits": 0}


def kernel_name(source_without_name: str) -> str:
    """A stable kernel name derived from the source (the same text hashes alike everywhere)."""
    return "rlk_" + hashlib.sha256(source_without_name.encode()).hexdigest()[:20]


@functools.cache
def has_libmvec() -> bool:
    """Whether this process's C library has glibc's SIMD math (libmvec, 2.35 or later)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        lib_mvec = ctypes.CDLL("libmvec.so.1")
    except OSError:
        return False
    # tanhf's AVX2 version arrived with the rest of the set codegen_c.LIBMVEC declares
    return hasattr(lib_mvec, "_ZGVdN8v_tanhf") and hasattr(lib_mvec, "_ZGVbN4vv_atan2f")


@functools.cache
def headers_digest() -> str:
    """A hash of the headers generated C kernels include (ral_half.h, ral_fastmath.h, ...)."""
    h, d = hashlib.sha256(), include_dir()
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            h.update(name.encode() + f.read())
    return h.hexdigest()[:12]


def options_for(target: Target) -> str:
    """Compiler options for the target's compile entry."""
    if target.lang == "c":
        # The host plugin adds -O3 -fopenmp itself; these let loops over math calls vectorise
        # without changing results (no errno, no FP traps; NaN/inf semantics kept). The
        # headers' digest is there for the disk cache, whose key holds the options: a kernel
        # compiled against an older ral_half.h must not be reused.
        opts = f"-I{include_dir()} -fno-math-errno -fno-trapping-math -DRAL_JIT_HEADERS={headers_digest()}"
        if has_libmvec() and os.environ.get("TORCH_FL_JIT_LIBMVEC", "1") != "0":
            opts += " -DRAL_JIT_LIBMVEC -lmvec"
        return opts
    return "-cl-fp32-correctly-rounded-divide-sqrt"


def warn_once(dev: int, reason: str, detail: str) -> None:
    """warnings.warn once per (device, reason) with the compiler's message."""
    key = (dev, reason)
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"torch_fl.jit: {reason} on ral:{dev}; the op falls back to the next tier.\n{detail}",
        RuntimeWarning,
        stacklevel=4,
    )


def compile_kernel(target: Target, source: str, name: str) -> int | None:
    """Launchable handle of kernel `name` in `source` on target, or None (warned) on failure."""
    key = (target.dev, name, hash(source))
    with _lock:
        if key in _handles:
            STATS["hits"] += 1
            return _handles[key]
        out = ffi.new("int64_t*")
        t0 = time.perf_counter()
        status = lib.rt_kernel_compile(
            target.dev, target.lang.encode(), source.encode(), options_for(target).encode(), name.encode(), out
        )
        STATS["compiles"] += 1
        STATS["compile_s"] += time.perf_counter() - t0
        if status:
            STATS["failures"] += 1
            msg = ffi.string(lib.rt_last_error()).decode(errors="replace")
            no_cc = status == lib.RAL_ERROR_UNSUPPORTED or "no C compiler" in msg or "no compiler" in msg
            reason = "no compiler" if no_cc else "kernel compile failed"
            warn_once(target.dev, reason, msg)
            _handles[key] = None
            return None
        _handles[key] = out[0]
        return out[0]


def kernel_for(target: Target, key: tuple, make_source) -> int | None:
    """compile_kernel(target, *make_source()), remembered under `key`: a caller that launches
    the same generated kernel every step (adam_step) skips regenerating and hashing its source."""
    k = (target.dev, key)
    if k in _by_key:
        return _by_key[k]
    handle = compile_kernel(target, *make_source())
    with _lock:
        _by_key[k] = handle
    return handle


def clear() -> None:
    """Forget compiled handles and warnings (tests use it to force fresh compiles)."""
    with _lock:
        _handles.clear()
        _by_key.clear()
        _warned.clear()
