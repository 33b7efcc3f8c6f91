"""Plugins as the router sees them: loader record + validated manifest + resolved kernels."""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from torch_fl._native import ffi, lib
from torch_fl.core.dtype_names import CODE_OF_NAME
from torch_fl.core.errors import ManifestError
from torch_fl.core.manifest import KernelEntry, Manifest, load_manifest
from torch_fl.core.runtime import PluginRecord, device_records, ensure_initialized, on_initialized, plugin_records


@dataclass
class PluginState:
    """One plugin: loader status refined by the manifest (DEGRADED / INVALID_MANIFEST)."""

    record: PluginRecord
    status: str
    reason: str
    manifest: Manifest | None = None
    devices: list[int] = field(default_factory=list)
    disabled: list[tuple[KernelEntry, str]] = field(default_factory=list)
    # dtypes the manifest declares but the device lacks ("float16: not supported by this
    # device"): by design, not a fault, so the plugin stays LOADED and says so here
    notes: list[str] = field(default_factory=list)
    # op name -> entries sorted by priority (highest first), only enabled ones
    by_op: dict[str, list[KernelEntry]] = field(default_factory=dict)


def refuse_unsupported_dtypes(entry: KernelEntry, dtype_mask: int | None) -> tuple[KernelEntry, list[str]]:
    """The entry restricted to dtypes the device declares (e.g. no float16 without fp16),
    and the names of the dtypes refused."""
    from dataclasses import replace

    if dtype_mask is None:
        return entry, []
    kept = frozenset(c for c in entry.dtype_codes if dtype_mask & (1 << c))
    refused = sorted((n for n, c in CODE_OF_NAME.items() if c in entry.dtype_codes - kept), key=CODE_OF_NAME.get)
    return (replace(entry, dtype_codes=kept), refused) if refused else (entry, [])


def unsupported_dtype_note(dtype: str) -> str:
    """The note a LOADED plugin carries for a dtype its manifest declares and its device lacks."""
    return f"{dtype}: not supported by this device"


def canonical_op(name: str) -> str:
    """An op name as the router spells it: 'aten::relu.default' is 'aten::relu'."""
    return name[: -len(".default")] if name.endswith(".default") else name


class Registry:
    """All plugins, their devices and their kernels; rebuilt by reload()."""

    def __init__(self):
        self._lock = threading.RLock()
        self.plugins: list[PluginState] = []
        self.device_plugin: dict[int, PluginState] = {}
        self._handles: dict[tuple[int, str], int] = {}
        # Raises LookupError for an op name this torch lacks (the torch-facing API installs
        # op_schema.resolve_op); None in torch-free tools, which skip that check.
        self.op_check = None

    def reload(self) -> None:
        """Re-read every manifest and re-resolve every kernel symbol."""
        ensure_initialized(use=False)
        with self._lock:
            devices = device_records()
            plugins = []
            dev_of_plugin: dict[int, list[int]] = {}
            for d in devices:
                dev_of_plugin.setdefault(d.plugin, []).append(d.index)
            self._handles = {}
            for rec in plugin_records():
                st = PluginState(
                    record=rec, status=rec.status, reason=rec.reason, devices=dev_of_plugin.get(rec.index, [])
                )
                if rec.status == "LOADED":
                    masks = [d.dtype_mask for d in devices if d.plugin == rec.index]
                    self._attach_manifest(st, masks[0] if masks else None)
                plugins.append(st)
            self.plugins = plugins
            self.device_plugin = {d: p for p in plugins for d in p.devices}

    def _attach_manifest(self, st: PluginState, dtype_mask: int | None = None) -> None:
        """Load the plugin's manifest and keep the entries this device can run.

        A missing kernel symbol or an op this torch lacks disables the entry and makes the
        plugin DEGRADED (a fault to fix). Dtypes the device says it lacks (PoCL has no
        float16) are only refused: the plugin stays LOADED, with one note per dtype.
        """
        path = Path(st.record.dir) / "manifest.json"
        try:
            st.manifest = load_manifest(path)
        except ManifestError as exc:
            st.status, st.reason = "INVALID_MANIFEST", str(exc)
            warnings.warn(f"torch_fl: plugin {st.record.name!r} ignored its kernels: {exc}", stacklevel=3)
            return
        probe_dev = st.devices[0] if st.devices else None
        lacking: list[str] = []
        for entry in st.manifest.entries:
            op = canonical_op(entry.op)
            if self.op_check is not None:
                try:
                    self.op_check(entry.op)
                except LookupError as exc:
                    st.disabled.append((entry, str(exc)))
                    continue
            if probe_dev is not None and self._lookup(probe_dev, entry.kernel) is None:
                st.disabled.append((entry, f"kernel symbol {entry.kernel!r} is not exported by {st.record.library}"))
                continue
            entry, refused = refuse_unsupported_dtypes(entry, dtype_mask)
            lacking += [n for n in refused if n not in lacking]
            if entry.dtype_codes:
                st.by_op.setdefault(op, []).append(entry)
        for entries in st.by_op.values():
            entries.sort(key=lambda e: -e.priority)
        st.notes = [unsupported_dtype_note(n) for n in sorted(lacking, key=CODE_OF_NAME.get)]
        if st.disabled:
            st.status = "DEGRADED"
            first_entry, why = st.disabled[0]
            more = f" (+{len(st.disabled) - 1} more)" if len(st.disabled) > 1 else ""
            st.reason = f"{len(st.disabled)} manifest entr{'y' if len(st.disabled) == 1 else 'ies'} disabled: {first_entry.op}: {why}{more}"
        elif st.notes:
            st.reason = "; ".join(st.notes)

    def _lookup(self, dev: int, symbol: str) -> int | None:
        key = (dev, symbol)
        h = self._handles.get(key)
        if h is None:
            out = ffi.new("int64_t*")
            status = lib.rt_kernel_lookup(dev, symbol.encode(), out)
            if status:
                return None
            h = self._handles[key] = out[0]
        return h

    def entries(self, dev: int, op: str) -> list[KernelEntry]:
        """Enabled manifest entries for an op on a device, highest priority first."""
        st = self.device_plugin.get(dev)
        return st.by_op.get(op, []) if st is not None else []

    def handle(self, dev: int, entry: KernelEntry) -> int | None:
        """Runtime kernel handle of an entry on a device."""
        return self._lookup(dev, entry.kernel)

    def plugin_of(self, dev: int) -> PluginState | None:
        """The plugin state that drives a device."""
        return self.device_plugin.get(dev)


REGISTRY = Registry()
# The router's view is built when the plugins load (lazily, at the first device use).
on_initialized(REGISTRY.reload)
