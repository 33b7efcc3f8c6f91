"""What ralctl shows: plugins with their refined status, devices, and where plugins are searched.

Torch-free: the loader's records come from torch_fl.core.runtime, manifests from torch_fl.core.manifest,
and kernel symbols are looked up through the runtime. Only `check_op` (deep mode) needs torch.
The tools never load a plugin in their own process: probe.py runs `plugin_rows` and
`device_rows` in a child process, so a plugin that crashes is reported as CRASHED.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path


class RuntimeUnavailable(Exception):
    """The native runtime (torch_fl/_native) cannot be imported or initialised."""


@dataclass
class PluginRow:
    """One plugin as ralctl reports it."""

    name: str
    version: str
    abi: str
    status: str
    dependencies: list[str]
    reason: str
    devices: list[int]
    source: str
    dir: str
    disabled: list[str] = field(default_factory=list)  # "op: why" of each disabled manifest entry

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class DeviceRow:
    """One ral device as ralctl reports it."""

    id: str
    type: str
    name: str
    vendor: str
    memory: int
    status: str
    plugin: str
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


def runtime(initialise: bool = True):
    """torch_fl.core.runtime (initialised, unless not asked to: the tools' own process loads no
    plugin); raises RuntimeUnavailable with the cause and the fix."""
    try:
        from torch_fl.core import runtime as rt

        if initialise:
            rt.ensure_initialized()
    except ImportError as exc:
        raise RuntimeUnavailable(
            f"the native runtime is not built or cannot load ({exc}); build it with "
            "`python setup.py native` (in a source tree) or reinstall torch_fl"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any failure here means "no runtime"; say why
        raise RuntimeUnavailable(f"the native runtime failed to start: {exc}") from None
    return rt


def search_roots() -> list[tuple[str, str, bool]]:
    """(where it comes from, directory, exists) for every place the loader looks for plugins."""
    return [(src, path, os.path.isdir(path)) for src, path in runtime(initialise=False).search_roots()]


def _read_manifest(plugin_dir: str):
    """(manifest or None, error text or None) for a plugin directory."""
    from torch_fl.core.errors import ManifestError
    from torch_fl.core.manifest import load_manifest

    try:
        return load_manifest(Path(plugin_dir) / "manifest.json"), None
    except ManifestError as exc:
        return None, str(exc)


def _disabled_entries(manifest, device: int | None, check_op: Callable[[str], str | None] | None) -> list[str]:
    from torch_fl._native import ffi, lib

    out = []
    handle = ffi.new("int64_t*")
    for entry in manifest.entries:
        why = check_op(entry.op) if check_op else None
        if why is None and device is not None and lib.rt_kernel_lookup(device, entry.kernel.encode(), handle):
            why = f"kernel symbol {entry.kernel!r} is not exported by the plugin library"
        if why:
            out.append(f"{entry.op}: {why}")
    return out


def _dtype_notes(manifest, dtype_mask: int | None) -> list[str]:
    """The router's notes for dtypes the manifest declares and the device lacks (still LOADED)."""
    from torch_fl.core.dtype_names import CODE_OF_NAME
    from torch_fl.core.registry import refuse_unsupported_dtypes, unsupported_dtype_note

    lacking = {n for e in manifest.entries for n in refuse_unsupported_dtypes(e, dtype_mask)[1]}
    return [unsupported_dtype_note(n) for n in sorted(lacking, key=CODE_OF_NAME.get)]


def plugin_rows(check_op: Callable[[str], str | None] | None = None) -> list[PluginRow]:
    """Every plugin the loader saw, with LOADED refined to DEGRADED or INVALID_MANIFEST.

    check_op(op) returns why an op name is unusable (or None); pass one to also check op
    names against the installed torch, as the router does at import.
    """
    rt = runtime()
    devices_of: dict[int, list[int]] = {}
    for d in rt.device_records():
        devices_of.setdefault(d.plugin, []).append(d.index)
    rows = []
    for rec in rt.plugin_records():
        devices = devices_of.get(rec.index, [])
        manifest, problem = _read_manifest(rec.dir)
        row = PluginRow(
            rec.name,
            rec.version,
            f"{rec.abi[0]}.{rec.abi[1]}",
            rec.status,
            list(manifest.dependencies) if manifest else [],
            rec.reason,
            devices,
            rec.source,
            rec.dir,
        )
        if rec.status == "LOADED" and problem:
            row.status, row.reason = "INVALID_MANIFEST", problem
        elif rec.status == "LOADED":
            row.disabled = _disabled_entries(manifest, devices[0] if devices else None, check_op)
            if row.disabled:
                extra = f" (and {len(row.disabled) - 1} more)" if len(row.disabled) > 1 else ""
                row.status = "DEGRADED"
                row.reason = (
                    f"{len(row.disabled)} of {len(manifest.entries)} kernels disabled: {row.disabled[0]}{extra}"
                )
            else:
                masks = [d.dtype_mask for d in rt.device_records() if d.plugin == rec.index]
                row.reason = "; ".join(_dtype_notes(manifest, masks[0] if masks else None)) or row.reason
        rows.append(row)
    return rows


def device_rows(plugins: list[PluginRow] | None = None) -> list[DeviceRow]:
    """Every visible ral device; status READY, DEGRADED (its plugin lost kernels) or GONE."""
    rt = runtime()
    plugins = plugins if plugins is not None else plugin_rows()
    by_index = {i: p for i, p in enumerate(plugins)}
    rows = []
    for d in rt.device_records():
        plugin = by_index.get(d.plugin)
        status, reason = "READY", ""
        if not d.present:
            status, reason = "GONE", "the device disappeared; call torch_fl.rescan() after it returns"
        elif plugin is not None and plugin.status != "LOADED":
            status, reason = "DEGRADED", f"plugin {plugin.name} is {plugin.status}; see `ralctl plugin-status`"
        rows.append(
            DeviceRow(
                f"ral:{d.index}",
                d.type,
                d.name,
                d.vendor,
                d.total_memory,
                status,
                plugin.name if plugin else "?",
                reason,
            )
        )
    return rows


def why_no_devices(plugins: list[PluginRow]) -> str:
    """One sentence on why there is no device: no plugin found, or what the plugins reported."""
    if not plugins:
        where = "; ".join(f"{path} ({src}{'' if ok else ', missing'})" for src, path, ok in search_roots())
        return (
            f"No plugins found. Searched: {where}. Put a plugin directory (library + manifest.json) in one of "
            "them, or point TORCH_FL_PLUGIN_PATH at the folder that holds it."
        )
    parts = [f"{p.name}: {p.status}" + (f" ({p.reason})" if p.reason else ", 0 devices") for p in plugins]
    return "No ral device. Plugins: " + "; ".join(parts)


def op_checker() -> Callable[[str], str | None]:
    """check_op for plugin_rows that resolves op names in torch (imports torch: slow)."""
    # torch first: it loads torch_fl's torch-facing API (autoload) before any of its modules.
    import torch  # noqa: F401

    from torch_fl.tensor.op_schema import resolve_op

    def check(op: str) -> str | None:
        try:
            resolve_op(op)
        except LookupError as exc:
            return str(exc)
        return None

    return check
