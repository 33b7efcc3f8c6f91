"""The native RAL runtime (cffi). Imports nothing from torch."""

from pathlib import Path

from torch_fl._native._ral import ffi, lib

__all__ = ["ffi", "lib", "builtin_plugin_dir"]


def builtin_plugin_dir() -> str:
    """Absolute path of the plugins shipped with the package (torch_fl/_plugins)."""
    return str((Path(__file__).resolve().parent.parent / "_plugins").resolve())
