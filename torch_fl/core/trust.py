"""Ownership and mode checks for files torch_fl loads code from, from Python.

The check itself is the runtime's (``include/ral_trust.h`` through ``rt_trust_path``), so
plugins, kernel caches and the device guard's build cache are all judged by one rule."""

from __future__ import annotations

import os

from torch_fl._native import ffi, lib


def untrusted_reason(path: str | os.PathLike, exact_owner: bool = True) -> str | None:
    """Why `path` (or a folder above it) may not be trusted, or None when it may."""
    why = ffi.new("char[]", 4096)
    status = lib.rt_trust_path(os.fsencode(os.fspath(path)), int(exact_owner), why, len(why))
    if status == 0:
        return None
    return ffi.string(why).decode(errors="replace") or f"cannot check {os.fspath(path)}"
