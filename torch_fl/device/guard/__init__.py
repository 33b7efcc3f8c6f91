"""Build (once per torch version) and load the C++ device-guard shim for the ral device type."""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from torch_fl._native import ffi, lib
from torch_fl.core.trust import untrusted_reason
from torch_fl.device import compat

_SOURCE = Path(__file__).with_name("ral_guard.cpp")
_ALLOCATOR_SOURCE = Path(__file__).with_name("ral_allocator.cpp")
_RUNTIME_INCLUDE = Path(__file__).resolve().parents[2] / "_native" / "include"
_loaded: ctypes.CDLL | None = None
_allocator: ctypes.CDLL | None = None
_private_root: Path | None = None
# ral_allocator.cpp's ral_backend_meta_used once the shim is loaded (0 without it): nonzero
# once some ral tensor has backend metadata
BACKEND_META_USED = ctypes.c_int(0)


def cache_dir() -> Path:
    """XDG cache directory for torch_fl build products."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch_fl"


def _private(why: str) -> Path:
    """This process's own build folder (mode 0700, removed at exit), warning once why the
    shared cache is not used: the shim is rebuilt in every process until that is fixed."""
    global _private_root
    if _private_root is None:
        _private_root = Path(tempfile.mkdtemp(prefix="torch_fl-guard-"))
        atexit.register(shutil.rmtree, _private_root, ignore_errors=True)
        warnings.warn(
            f"torch_fl: the device guard's build cache is not used: {why}; building in a "
            f"private temporary folder instead (nothing is cached across processes)",
            stacklevel=4,
        )
    return _private_root


def _shim_path(source: Path = _SOURCE) -> Path:
    """Where the library built from `source` is loaded from: the user's cache when it and
    every folder above it pass the ownership checks (core/trust.py), as a plugin must, since
    anyone who can write there can run code in every process that uses ral."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    tag = f"torch{torch.__version__}-py{sys.version_info.major}{sys.version_info.minor}-{digest}"
    name = source.with_suffix(".so").name
    if _private_root is not None:
        return _private_root / tag / name
    shared = cache_dir() / "guard"
    try:
        shared.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        return _private(f"cannot create {shared}: {exc.strerror}") / tag / name
    path = shared / tag / name
    why = untrusted_reason(path if path.exists() else shared)
    return path if why is None else _private(why) / tag / name


def _compile(dest: Path, source: Path = _SOURCE) -> None:
    torch_dir = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, suffix=".so")
    os.close(fd)
    cmd = [
        os.environ.get("CXX", "g++"),
        "-O1",
        f"-std={compat.GUARD_CXX_STD}",  # per torch version, see compat.py
        "-shared",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-I{torch_dir / 'include'}",
        f"-I{_RUNTIME_INCLUDE}",
        str(source),
        "-o",
        tmp,
        f"-L{torch_dir / 'lib'}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{torch_dir / 'lib'}",
    ]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        os.replace(tmp, dest)  # atomic: concurrent first imports never see a half-written file
    except (OSError, subprocess.CalledProcessError) as exc:
        Path(tmp).unlink(missing_ok=True)
        detail = getattr(exc, "stderr", "") or str(exc)
        raise RuntimeError(f"cannot build {source.name}: {detail.strip()[:2000]}") from None


def load(device_count: int) -> bool:
    """Load the shim (building it if needed); False if unavailable (Python guard is used)."""
    global _loaded
    if _loaded is None:
        path = _shim_path()
        try:
            if not path.exists():
                _compile(path)
            _loaded = ctypes.CDLL(str(path))
        except (RuntimeError, OSError) as exc:
            warnings.warn(
                f"torch_fl: {exc}. Falling back to the single-device Python guard: backward "
                "passes on ral:1 and above will fail.",
                stacklevel=3,
            )
            return False
    _loaded.ral_guard_set_device_count(max(device_count, 8))
    _hand_over_runtime(_loaded)
    return True


# The shim's RuntimeCalls, field by field (ral_guard.cpp): the runtime's entry points it
# forwards to, then RAL_ERROR_NOT_READY.
_RUNTIME_CALLS = (
    "rt_device_synchronize",
    "rt_stream_synchronize",
    "rt_stream_query",
    "rt_last_error",
    "rt_current_stream",
    "rt_set_current_stream",
    "rt_event_create",
    "rt_event_destroy",
    "rt_event_record",
    "rt_event_synchronize",
    "rt_event_query",
    "rt_stream_wait_event",
    "rt_stream_create",
    "rt_current_device",
    "rt_set_current_device",
    "rt_device_count",
    "rt_event_elapsed_ms",
)


def _addresses(names) -> list[int]:
    """The addresses of the runtime's C entry points `names`, to hand to a shim."""
    return [int(ffi.cast("uintptr_t", ffi.addressof(lib, name))) for name in names]


class _RuntimeCalls(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in _RUNTIME_CALLS] + [("not_ready", ctypes.c_int)]


def _hand_over_runtime(shim: ctypes.CDLL) -> None:
    """Give the shim the runtime's stream, event and synchronization calls: PyTorch's
    device-generic paths (the autograd engine's stream handling, torch.accelerator,
    torch.Stream, torch.Event) reach the device through them."""
    calls = _RuntimeCalls(*_addresses(_RUNTIME_CALLS), lib.RAL_ERROR_NOT_READY)
    shim.ral_guard_set_runtime.argtypes = [ctypes.POINTER(_RuntimeCalls)]
    shim.ral_guard_set_runtime.restype = None
    shim.ral_guard_set_runtime(ctypes.byref(calls))  # copied by the shim


def register_hooks(device_count: int) -> bool:
    """Register the shim's PrivateUse1 hooks (with a pinned-memory allocator); False if the
    shim is not loaded or registration failed (then the caller registers Python hooks)."""
    if _loaded is None:
        return False
    return _loaded.ral_guard_register_hooks(device_count) == 0


# ral_allocator.cpp's StatsCalls, field by field: the runtime's entry points it calls, then
# RAL_ERROR_OUT_OF_MEMORY.
_STATS_CALLS = (
    "rt_memory_stats_get",
    "rt_reset_peak_stats",
    "rt_empty_cache",
    "rt_device_count",
    "rt_last_error",
    "rt_device_get",
    "rt_malloc",
    "rt_free",
    "rt_record_stream",
    "rt_current_stream",
    "rt_current_device",
    "rt_copy_d2d",
)


class _StatsCalls(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in _STATS_CALLS] + [("out_of_memory", ctypes.c_int)]


def load_allocator() -> bool:
    """Build (once per torch version) and install the PrivateUse1 DeviceAllocator that
    reports the MemoryPool to torch.accelerator's memory functions. False if it cannot be
    built against this torch (its interface moves between releases): those functions then
    keep PyTorch's own error, and nothing else changes. A failed build is remembered next to
    where the library would be, so later processes do not pay the compiler again."""
    global _allocator
    if _allocator is not None:
        return True
    path = _shim_path(_ALLOCATOR_SOURCE)
    failed = path.with_suffix(".failed")
    if failed.exists():
        return False
    try:
        if not path.exists():
            _compile(path, _ALLOCATOR_SOURCE)
        shim = ctypes.CDLL(str(path))
    except (RuntimeError, OSError) as exc:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            failed.write_text(str(exc))
        except OSError:
            pass  # an unwritable cache: the next process tries again
        return False
    calls = _StatsCalls(*_addresses(_STATS_CALLS), lib.RAL_ERROR_OUT_OF_MEMORY)
    shim.ral_allocator_install.argtypes = [ctypes.POINTER(_StatsCalls)]
    shim.ral_allocator_install.restype = ctypes.c_int
    # copied by the shim; 2: installed, but another extension holds PrivateUse1's metadata hooks
    if shim.ral_allocator_install(ctypes.byref(calls)) not in (0, 2):
        return False
    shim.ral_storage_new.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32]
    shim.ral_storage_new.restype = ctypes.c_void_p
    shim.ral_storage_decref.argtypes = [ctypes.c_void_p]
    shim.ral_storage_decref.restype = None
    shim.ral_storage_reset.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32]
    shim.ral_storage_reset.restype = ctypes.c_int
    shim.ral_storage_owns_block.argtypes = [ctypes.c_void_p]
    shim.ral_storage_owns_block.restype = ctypes.c_int
    shim.ral_storage_slice_base.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
    shim.ral_storage_slice_base.restype = ctypes.c_void_p
    shim.ral_storage_note_slice.argtypes = [ctypes.c_void_p]
    shim.ral_storage_note_slice.restype = None
    probe = torch.UntypedStorage(1)[0:1]  # held across the call: C++ reads its StorageImpl
    shim.ral_storage_note_slice(probe._cdata)  # the deleter every storage slice has
    if _loaded is not None:  # UntypedStorage.resize_ reaches the allocator through the guard's hooks
        shim.ral_allocator_resize_fn.restype = ctypes.c_void_p
        _loaded.ral_guard_set_resize.argtypes = [ctypes.c_void_p]
        _loaded.ral_guard_set_resize.restype = None
        _loaded.ral_guard_set_resize(shim.ral_allocator_resize_fn())
    global BACKEND_META_USED
    BACKEND_META_USED = ctypes.c_int.in_dll(shim, "ral_backend_meta_used")
    _allocator = shim
    return True


def storage_for_block(ptr: int, nbytes: int, device: int) -> torch.UntypedStorage | None:
    """A torch.UntypedStorage on ral:`device` that owns pool block `ptr` (`nbytes`) from now on
    and frees it to the pool when its last reference goes; None without the allocator shim."""
    if _allocator is None:
        return None
    raw = _allocator.ral_storage_new(ptr, nbytes, device)
    if not raw:
        raise RuntimeError(f"torch_fl: cannot make a storage for a block of {nbytes} bytes on ral:{device}")
    try:
        # the documented-internal way PyTorch itself turns a StorageImpl address into a storage
        # (torch.multiprocessing's StorageWeakRef); our strong reference keeps it alive meanwhile
        return torch.UntypedStorage._new_with_weak_ptr(raw)
    finally:
        _allocator.ral_storage_decref(raw)


def owns_block(storage: torch.UntypedStorage) -> bool:
    """Whether a ral storage owns a whole pool block (torch_fl allocated it, or made it for a
    Buffer), as opposed to memory PyTorch was handed (a DLPack import)."""
    return _allocator is not None and _allocator.ral_storage_owns_block(storage._cdata) == 1


def slice_base(storage: torch.UntypedStorage) -> tuple[torch.UntypedStorage, int] | None:
    """(the block-owning ral storage a storage slice `s[a:b]` lies in, the slice's byte offset
    in it), or None if `storage` is no slice of such a storage (or the shim is missing)."""
    if _allocator is None:
        return None
    offset = ctypes.c_uint64(0)
    raw = _allocator.ral_storage_slice_base(storage._cdata, ctypes.byref(offset))
    if not raw:
        return None
    try:  # as storage_for_block: our reference keeps it alive until Python holds one
        return torch.UntypedStorage._new_with_weak_ptr(raw), offset.value
    finally:
        _allocator.ral_storage_decref(raw)


def reset_storage_block(storage: torch.UntypedStorage, ptr: int, nbytes: int, device: int) -> None:
    """Point a ral storage at pool block `ptr` (which it then owns); its old block is freed."""
    if _allocator.ral_storage_reset(storage._cdata, ptr, nbytes, device) != 0:
        raise RuntimeError(f"torch_fl: cannot re-point a ral:{device} storage at a new block")


def default_rng_state(device: int) -> int | None:
    """Address of the (seed, offset) uint64 pair of a device's default C++ generator (the one
    PyTorch's hooks hand out), or None without the shim."""
    if _loaded is None:
        return None
    fn = _loaded.ral_guard_default_rng_state
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_void_p
    return fn(device)


def update_hooks(device_count: int) -> None:
    """Tell the registered C++ hooks the device count found at (lazy) initialisation.

    ral_guard_register_hooks stores the count before it registers; registration itself is
    once-only, so a later call just updates the count (and answers 1, which is expected).
    """
    if _loaded is not None:
        _loaded.ral_guard_register_hooks(device_count)
