"""Build the native RAL runtime as the cffi extension ``torch_fl._native._ral``.

The cdef is derived from ``ral_runtime.h`` and ``ral_plugin.h`` so the headers stay
the single source of truth. Run as a script to build in place (repo root), or call
``build(inplace_dir)`` from setup.py.
"""

from __future__ import annotations

import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
HEADERS = ("ral_plugin.h", "ral_runtime.h")
SOURCES = sorted(p.name for p in HERE.glob("*.c") if p.name != "_ral.c")
MODULE = "torch_fl._native._ral"

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_INT_DEFINE = re.compile(r"#\s*define\s+([A-Za-z_]\w*)\s+(.+)")


def _strip_cplusplus_blocks(lines: list[str]) -> list[str]:
    """Drop `#ifdef __cplusplus ... #endif` blocks (the extern "C" wrappers)."""
    out, skipping = [], False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#ifdef __cplusplus"):
            skipping = True
        elif skipping and stripped.startswith("#endif"):
            skipping = False
        elif not skipping:
            out.append(line)
    return out


def header_cdef(text: str) -> str:
    """Turn one header into cffi cdef text: declarations plus integer #defines."""
    lines = _strip_cplusplus_blocks(_COMMENT.sub("", text).splitlines())
    out = []
    for line in lines:
        stripped = line.strip()
        if not stripped.startswith("#"):
            out.append(line)
            continue
        match = _INT_DEFINE.match(stripped)
        # Keep integer constants only: strings and function-like macros cannot be cdef'd.
        if match and '"' not in match.group(2) and "(" not in match.group(1):
            value = match.group(2).strip()
            if re.fullmatch(r"[\w\s()<>|+\-*]+", value) and not value.startswith("__"):
                out.append(f"#define {match.group(1)} ...")
    return "\n".join(line for line in out if line.strip())


def make_ffibuilder() -> cffi.FFI:
    """The configured FFI builder for the runtime."""
    ffi = cffi.FFI()
    ffi.cdef("\n".join(header_cdef((INCLUDE / h).read_text()) for h in HEADERS))
    ffi.set_source(
        MODULE,
        '#include "ral_runtime.h"\n',
        sources=[str(HERE / s) for s in SOURCES],
        include_dirs=[str(INCLUDE), str(HERE)],
        libraries=["dl", "pthread"],
        extra_compile_args=["-O2", "-Wall", "-Wextra", "-std=c11", "-D_GNU_SOURCE"],
    )
    return ffi


def build(inplace_dir: str | Path) -> Path:
    """Compile the extension into ``<inplace_dir>/torch_fl/_native/``; return its path.

    ``inplace_dir`` is the directory that contains the ``torch_fl`` package (the repo
    root for an in-place build, or setuptools' build_lib).
    """
    dest = Path(inplace_dir).resolve() / "torch_fl" / "_native"
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ral_build_") as tmp:
        built = Path(make_ffibuilder().compile(tmpdir=tmp, verbose=False))
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        target = dest / f"_ral{suffix}"
        shutil.copy2(built, target)
    return target


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else HERE.parent.parent))
