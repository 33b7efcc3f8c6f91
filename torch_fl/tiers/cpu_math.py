"""Warm oneMKL's vector math once, on one thread, before the cpu tier runs PyTorch's kernels.

PyTorch's CPU wheels route contiguous float32/float64 unary math (tanh, exp, sqrt, ...) to
oneMKL VML (aten/src/ATen/cpu/vml.h), which resolves each function's kernel lazily on its
first call. When that first call runs on two intra-op threads at once, one thread can run
the low-accuracy AVX2 "EP" kernel for its whole chunk although PyTorch asks for VML_HA
(pytorch/pytorch#188792, oneMKL 2024.2): ~5e-5 relative error (up to ~900 ulp) on half of
the tensor, once per process. One 1-element call per function and precision, on one thread,
resolves the dispatch, as the upstream fix does; later results are bitwise unchanged.

The calls go straight to the VML symbols libtorch_cpu exports, with PyTorch's own mode
flags, so that no torch mode (ral_mode, FakeTensorMode during tracing, a user's dispatch
mode) can redirect or fake them: the runtime may initialise inside any of those.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import torch

# oneMKL's functions behind aten's VML-routed unary ops (vml.h's IMPLEMENT_VML_MKL list; the
# wheel links only the vms*/vmd* it uses, and tests/test_cpu_math.py checks that every
# one-input function exported is named here).
VML_FUNCTIONS = (
    "Acos",
    "Asin",
    "Atan",
    "Cos",
    "Erf",
    "Erfc",
    "ErfInv",
    "Exp",
    "Ln",
    "Log10",
    "Log2",
    "Sin",
    "Sqrt",
    "Tan",
    "Tanh",
    "Trunc",
)
# VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE (mkl_vml_defines.h): the mode vml.h passes.
_TORCH_VML_MODE = 0x2 | 0x140000 | 0x100

_lock = threading.Lock()
_warmed: list[str] | None = None


def torch_cpu_library() -> Path:
    """Path of the libtorch_cpu shared object this torch loaded."""
    return Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"


def enabled() -> bool:
    """Whether the warm-up runs: PyTorch has MKL and TORCH_FL_VML_WARMUP is not 0."""
    return torch.backends.mkl.is_available() and os.environ.get("TORCH_FL_VML_WARMUP", "1") != "0"


def warm_vml() -> list[str]:
    """Resolve VML's dispatch for each exported VML_FUNCTIONS entry, once per process.

    Returns the vms*/vmd* symbols called (empty when disabled or already done)."""
    global _warmed
    with _lock:
        if _warmed is not None or not enabled():
            return []
        _warmed = []
        try:
            lib = ctypes.CDLL(str(torch_cpu_library()), mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        except OSError:  # another layout (a source build's libtorch): nothing to warm
            return []
        for prefix, ctype in (("vms", ctypes.c_float), ("vmd", ctypes.c_double)):
            src, dst = ctype(0.5), ctype(0.0)
            for name in VML_FUNCTIONS:
                fn = getattr(lib, prefix + name, None)
                if fn is None:
                    continue
                fn.restype = None
                # n as 64 bits: an LP64 MKL_INT reads the low half (1), an ILP64 one all of it
                fn.argtypes = (ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
                fn(1, ctypes.addressof(src), ctypes.addressof(dst), _TORCH_VML_MODE)
                _warmed.append(prefix + name)
        return list(_warmed)
