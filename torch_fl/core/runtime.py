"""Python face of the native runtime: status checking, discovery records and device records.

This module does not import torch, so light tools (ralctl) can use it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from torch_fl._native import builtin_plugin_dir, ffi, lib
from torch_fl.core.errors import error_for_status

PLUGIN_STATUS_NAMES = {
    lib.RT_PLUGIN_LOADED: "LOADED",
    lib.RT_PLUGIN_MISSING_DEPS: "MISSING_DEPS",
    lib.RT_PLUGIN_ABI_MISMATCH: "ABI_MISMATCH",
    lib.RT_PLUGIN_LOAD_FAILED: "LOAD_FAILED",
    lib.RT_PLUGIN_GONE: "GONE",
    lib.RT_PLUGIN_SHADOWED: "SHADOWED",
    lib.RT_PLUGIN_INSECURE: "INSECURE",
    lib.RT_PLUGIN_FAILED: "FAILED",
}
SOURCE_NAMES = {
    lib.RT_SOURCE_BUILTIN: "builtin",
    lib.RT_SOURCE_ENV_PATH: "TORCH_FL_PLUGIN_PATH",
    lib.RT_SOURCE_SYSTEM: "system",
}

_init_lock = threading.Lock()
_initialized = False


def system_plugin_dir() -> str:
    """The system plugin folder the loader scans last (TORCH_FL_SYSTEM_PLUGIN_DIR overrides)."""
    return ffi.string(lib.rt_system_plugin_root()).decode()


def search_roots() -> list[tuple[str, str]]:
    """(source name, directory) for every place the loader looks for plugins, in order."""
    roots = [("builtin", builtin_plugin_dir())]
    roots += [("TORCH_FL_PLUGIN_PATH", p) for p in os.environ.get("TORCH_FL_PLUGIN_PATH", "").split(":") if p]
    roots.append(("system", system_plugin_dir()))
    return roots


def last_error() -> str:
    """The runtime's thread-local message for the last failure on this thread."""
    return ffi.string(lib.rt_last_error()).decode(errors="replace")


def raise_status(status: int, **context):
    """Raise the torch_fl exception for a non-zero status, with the runtime's message."""
    raise error_for_status(status, last_error(), **context)


def check(status: int, **context) -> None:
    """Raise if a runtime call returned an error status."""
    if status:
        raise_status(status, **context)


def ensure_initialized() -> None:
    """Discover and load plugins once per process."""
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            check(lib.rt_init(os.fsencode(builtin_plugin_dir())))
            _initialized = True


def rescan() -> None:
    """Re-run discovery: load new plugins, retry MISSING_DEPS, mark vanished ones GONE."""
    ensure_initialized()
    check(lib.rt_rescan())


def _text(chars) -> str:
    return ffi.string(chars).decode(errors="replace")


@dataclass(frozen=True)
class PluginRecord:
    """What the native loader knows about one plugin directory."""

    index: int
    name: str
    version: str
    status: str
    source: str
    abi: tuple[int, int]
    n_devices: int
    has_compile: bool
    dir: str
    library: str
    reason: str


@dataclass(frozen=True)
class DeviceRecord:
    """The standard device descriptor of one ral device."""

    index: int
    plugin: int
    local_index: int
    present: bool
    name: str
    vendor: str
    type: str
    driver_version: str
    total_memory: int
    max_alloc_size: int
    dtype_mask: int
    flags: int
    max_rank: int

    @property
    def host_mappable(self) -> bool:
        """Whether the host can address this device's memory directly (zero-copy fallback)."""
        return bool(self.flags & lib.RAL_DEVICE_HOST_MAPPABLE)

    @property
    def has_dma(self) -> bool:
        """Whether the device has a copy engine."""
        return bool(self.flags & lib.RAL_DEVICE_HAS_DMA)

    @property
    def fp16(self) -> bool:
        """Whether the device computes natively in float16."""
        return bool(self.flags & lib.RAL_DEVICE_FP16)


def plugin_records() -> list[PluginRecord]:
    """Every plugin the loader saw, in discovery order, whatever its status."""
    ensure_initialized()
    out = []
    rec = ffi.new("rt_plugin_record*")
    for i in range(lib.rt_plugin_count()):
        check(lib.rt_plugin_get(i, rec))
        out.append(
            PluginRecord(
                index=i,
                name=_text(rec.name),
                version=_text(rec.version),
                status=PLUGIN_STATUS_NAMES.get(rec.status, f"UNKNOWN({rec.status})"),
                source=SOURCE_NAMES.get(rec.source, str(rec.source)),
                abi=(rec.abi_major, rec.abi_minor),
                n_devices=rec.n_devices,
                has_compile=bool(rec.has_compile),
                dir=_text(rec.dir),
                library=_text(rec.library),
                reason=_text(rec.reason),
            )
        )
    return out


def unloaded_plugins_note() -> str:
    """The suffix "; not loaded: name: STATUS: reason, ..." for error messages ("" when every plugin loaded)."""
    bad = [f"{p.name}: {p.status}: {p.reason}" for p in plugin_records() if p.status not in ("LOADED", "SHADOWED")]
    return "; not loaded: " + ", ".join(bad) if bad else ""


def device_records() -> list[DeviceRecord]:
    """Every visible ral device, in `ral:N` order."""
    ensure_initialized()
    out = []
    rec = ffi.new("rt_device_record*")
    for i in range(lib.rt_device_count()):
        check(lib.rt_device_get(i, rec))
        info = rec.info
        out.append(
            DeviceRecord(
                index=i,
                plugin=rec.plugin,
                local_index=rec.local_index,
                present=bool(rec.present),
                name=_text(info.name),
                vendor=_text(info.vendor),
                type=_text(info.type),
                driver_version=_text(info.driver_version),
                total_memory=info.total_memory,
                max_alloc_size=info.max_alloc_size,
                dtype_mask=info.dtype_mask,
                flags=info.flags,
                max_rank=info.max_rank,
            )
        )
    return out


def device_count() -> int:
    """Number of visible ral devices."""
    ensure_initialized()
    return lib.rt_device_count()
