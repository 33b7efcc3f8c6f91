"""Python face of the native runtime: status checking, discovery records and device records.

This module does not import torch, so light tools (ralctl) can use it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from torch_fl._native import builtin_plugin_dir, ffi, lib
from torch_fl.core import crash_marker
from torch_fl.core.errors import ForkedChildError, error_for_status

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


class _InitState:
    """One-time, thread-safe plugin loading (see ensure_initialized)."""

    def __init__(self):
        self.lock = threading.RLock()  # re-entrant: an init hook may query the runtime
        self.ready = False  # plugins loaded and every init hook ran
        self.used = False  # a device was used, not only counted (CUDA's is_initialized)
        self.running = False  # inside the one init call (on the thread holding the lock)
        self.failure: tuple[type[Exception], tuple] | None = None
        self.bad_fork = False  # forked from a parent that had initialised (or was initialising)


_state = _InitState()
# Run once, in order, right after the plugins loaded (registry reload, device guard, ...),
# still under the init lock; the "late" ones after initialisation is complete, outside it
# (free to run device work that other threads may join, such as a backward pass).
_init_hooks: list = []
_late_hooks: list = []


def on_initialized(fn, late: bool = False) -> None:
    """Run fn() once right after the plugins are loaded (now, if they already are)."""
    if _state.ready:
        fn()
    else:
        (_late_hooks if late else _init_hooks).append(fn)


def is_initialized() -> bool:
    """Whether a ral device has been used in this process, as torch.cuda.is_initialized().

    Counting devices or reading their records loads the plugins but, as on CUDA, does not
    count: code such as DeviceMesh picks the process's device only while this is False.
    False in a bad fork."""
    return _state.ready and _state.used and not _state.bad_fork


def in_bad_fork() -> bool:
    """Whether this process was forked after its parent initialised ral."""
    return _state.bad_fork


def ensure_initialized(use: bool = True) -> None:
    """Load and initialise every plugin, once per process, at the first device use.

    Importing torch_fl (and so `import torch`, through autoload) runs no vendor code; this is
    the one place where plugins are loaded. Thread-safe: a second thread waits for the first;
    a failed init raises the same error again on every later call. Raises ForkedChildError
    in a process forked after its parent had initialised. use=False: a query (device count,
    records), which loads the plugins without counting as a device use (is_initialized).
    """
    if not (_state.ready and not _state.bad_fork):
        _initialize()
    if use:
        _state.used = True


def _initialize() -> None:
    st = _state
    if st.bad_fork:
        raise ForkedChildError("initialising the ral runtime")
    with st.lock:
        if st.ready or st.running:  # done, or a re-entrant query from an init hook
            return
        if st.failure is not None:
            cls, args = st.failure
            try:
                again = cls(*args)
            except Exception:  # noqa: BLE001 - an exception class with another signature
                again = RuntimeError(*args)
            raise again
        st.running = True
        try:
            crash_marker.before_init(lib)
            check(lib.rt_init(os.fsencode(builtin_plugin_dir())))
            for fn in list(_init_hooks):
                fn()
        except Exception as exc:
            st.failure = (type(exc), exc.args)
            raise
        finally:
            st.running = False
        st.ready = True
    while _late_hooks:
        _late_hooks.pop(0)()


def _after_fork_in_child() -> None:
    # A child of a process that had loaded (or was loading) plugins inherits a runtime whose
    # threads and contexts are gone: it must not touch it. A child forked before that may
    # initialise normally (that is what lazy initialisation buys).
    global _state
    old = _state
    _state = _InitState()
    _state.ready = old.ready
    _state.failure = old.failure
    _state.bad_fork = old.bad_fork or old.ready or old.running


os.register_at_fork(after_in_child=_after_fork_in_child)


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
        """Whether the device's own kernels compute float16 (in half or in float, each result
        rounded to float16 as CPU does): RAL_DEVICE_FP16, set by both built-in plugins."""
        return bool(self.flags & lib.RAL_DEVICE_FP16)


def _query() -> None:
    # Queries (counts and records) read memory the runtime filled: in a bad fork they answer
    # from what the parent found, as torch.cuda.device_count() does; anything else initialises.
    if not _state.ready:
        ensure_initialized(use=False)


def plugin_records() -> list[PluginRecord]:
    """Every plugin the loader saw, in discovery order, whatever its status."""
    _query()
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


def device_records() -> list[DeviceRecord]:
    """Every visible ral device, in `ral:N` order."""
    _query()
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
    """Number of visible ral devices (initialises the runtime on first call)."""
    _query()
    return lib.rt_device_count()


def visible_devices_summary() -> str:
    """What is visible and what failed, for "ral:N does not exist" messages: "2 ral device(s)
    (host: 1, opencl: 1); plugin 'foo' at /dir failed to load: MISSING_DEPS libfoo.so.1"."""
    devices = device_records()
    plugins = plugin_records()
    per_plugin: dict[int, int] = {}
    for d in devices:
        per_plugin[d.plugin] = per_plugin.get(d.plugin, 0) + 1
    names = {p.index: p.name for p in plugins}
    counts = ", ".join(f"{names.get(i, i)}: {n}" for i, n in per_plugin.items())
    text = f"{len(devices)} ral device(s) are visible" + (f" ({counts})" if counts else "")
    failed = [p for p in plugins if p.status not in ("LOADED", "SHADOWED")]
    for p in failed:
        text += f"; plugin '{p.name}' at {p.dir} failed to load: {p.status} {p.reason}".rstrip()
    skipped = os.environ.get("TORCH_FL_PLUGIN_SKIP")
    if skipped:
        text += f"; TORCH_FL_PLUGIN_SKIP={skipped} skips those plugins"
    return text + " (ralctl plugin-status)"
