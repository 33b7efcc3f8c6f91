"""Which language a device compiles, and the storage type names of each dtype there."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

from torch_fl.core.dtype_names import names_in_mask
from torch_fl.core.registry import REGISTRY
from torch_fl.core.runtime import device_records
from torch_fl.jit.spec import LOWP

# The plugins whose compile entry this package can feed, and the lang they take.
LANG_OF_PLUGIN = {"host": "c", "opencl": "opencl-c"}

_C_TYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.int16: "int16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.bool: "uint8_t",
}
_CL_TYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.int64: "long",
    torch.int32: "int",
    torch.int16: "short",
    torch.int8: "char",
    torch.uint8: "uchar",
    torch.bool: "uchar",
}
CTYPES = {"c": _C_TYPES, "opencl-c": _CL_TYPES}
# Half-precision dtypes (spec.LOWP) are storage only: a generated kernel loads them into
# float, computes in float (PyTorch's opmath type for them) and rounds each op's result back,
# as eager does (ral_half.h). Only fusion regions use them (fusion.py); single-op jit kernels
# do not.
_LOWP_TYPES = {"c": "uint16_t", "opencl-c": "ushort"}


class Target:
    """One device as a code generation target."""

    __slots__ = ("dev", "lang", "plugin", "dtypes", "lowp", "ctypes")

    def __init__(self, dev: int, lang: str, plugin: str, dtypes: frozenset, lowp: frozenset = frozenset()):
        self.dev = dev
        self.lang = lang
        self.plugin = plugin
        self.dtypes = dtypes  # computed in
        self.lowp = lowp  # stored as 16-bit words, computed in float (LOWP)
        self.ctypes = {**CTYPES[lang], **{dt: _LOWP_TYPES[lang] for dt in lowp}}

    def ctype(self, dt: torch.dtype) -> str:
        """The language's storage type of a dtype."""
        return self.ctypes[dt]


@cache
def target_of(dev: int) -> Target | None:
    """The code generation target of ral:dev, or None if its plugin cannot compile for us."""
    st = REGISTRY.plugin_of(dev)
    if st is None or not st.record.has_compile:
        return None
    lang = LANG_OF_PLUGIN.get(st.record.name)
    if lang is None:
        return None
    rec = next((r for r in device_records() if r.index == dev), None)
    mask_names = set(names_in_mask(rec.dtype_mask)) if rec is not None and hasattr(rec, "dtype_mask") else None

    def held(dt):
        return mask_names is None or str(dt).replace("torch.", "") in mask_names

    dts = frozenset(dt for dt in CTYPES[lang] if held(dt))
    return Target(dev, lang, st.record.name, dts, frozenset(dt for dt in LOWP if held(dt)))


def include_dir() -> str:
    """Directory holding ral_plugin.h (the only header generated C includes)."""
    return str(Path(__file__).resolve().parent.parent / "_native" / "include")
