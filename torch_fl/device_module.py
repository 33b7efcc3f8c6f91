"""The `torch.ral` module: device queries, synchronization, memory stats, RNG and streams."""

from __future__ import annotations

import threading

import torch

from . import rng
from ._native import lib
from .memory import memory_stats_dict
from .runtime import check, device_records
from .runtime import device_count as _device_count
from .streams_state import current as _current_stream

_tls = threading.local()


def is_available() -> bool:
    """True if at least one ral device is present."""
    return _device_count() > 0


def is_initialized() -> bool:
    """The runtime initializes at import; always True."""
    return True


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    """Number of visible ral devices."""
    return _device_count()


def current_device() -> int:
    """Index of the current ral device of this thread."""
    return getattr(_tls, "device", 0)


def _index(device) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        idx = device
    else:
        d = torch.device(device)
        if d.type not in ("ral", "privateuseone"):
            raise ValueError(f"expected a ral device, got {d}")
        idx = d.index if d.index is not None else current_device()
    n = _device_count()
    if not 0 <= idx < n:
        raise RuntimeError(f"ral:{idx} does not exist: {n} ral device(s) are visible (ralctl list-devices)")
    return idx


def set_device(device) -> None:
    """Make a ral device current for this thread."""
    _tls.device = _index(device)


class device:
    """Context manager that changes the current ral device."""

    def __init__(self, dev):
        self.idx = _index(dev)
        self.prev = None

    def __enter__(self):
        self.prev = current_device()
        _tls.device = self.idx

    def __exit__(self, *exc):
        _tls.device = self.prev


def synchronize(device=None) -> None:
    """Wait for all work on a ral device; raises the first asynchronous kernel error."""
    from .transfer import SYNC_OBSERVERS

    idx = _index(device)
    for obs in SYNC_OBSERVERS:
        obs(idx, "torch.ral.synchronize")
    check(lib.rt_device_synchronize(idx))


def get_device_name(device=None) -> str:
    """Name of a ral device."""
    return device_records()[_index(device)].name


def get_device_properties(device=None):
    """The device descriptor record."""
    return device_records()[_index(device)]


def memory_stats(device=None) -> dict:
    """MemoryPool statistics of a device."""
    return memory_stats_dict(_index(device))


def memory_allocated(device=None) -> int:
    """Bytes in live tensors on a device."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    """Peak of memory_allocated since start or the last reset."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    """Bytes held by the pool (live + cached)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    """Peak of memory_reserved."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    """Reset the peak counters."""
    check(lib.rt_reset_peak_stats(_index(device)))


def empty_cache() -> None:
    """Hand every cached block of every device back to its plugin."""
    for i in range(_device_count()):
        check(lib.rt_empty_cache(i))


def set_memory_limit(limit_bytes: int, device=None) -> None:
    """Cap a device's pool (0 = no cap); like TORCH_FL_MEMORY_LIMIT for one device."""
    check(lib.rt_set_memory_limit(_index(device), int(limit_bytes)))


def manual_seed(seed: int) -> None:
    """Seed the current ral device."""
    rng.manual_seed(current_device(), seed)


def manual_seed_all(seed: int) -> None:
    """Seed every ral device (torch.manual_seed calls this)."""
    for i in range(max(_device_count(), 1)):
        rng.manual_seed(i, seed)


def seed() -> None:
    """Seed the current device with a non-deterministic value."""
    rng.manual_seed(current_device(), torch.seed())


def seed_all() -> None:
    """Seed every device non-deterministically."""
    manual_seed_all(torch.seed())


def initial_seed() -> int:
    """The seed of the current device."""
    return rng.seed_of(current_device())


def get_rng_state(device=None) -> torch.Tensor:
    """RNG state of a device as a uint8 CPU tensor."""
    return rng.get_state(_index(device))


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    """Restore a state from get_rng_state."""
    rng.set_state(_index(device), new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """RNG states of every device."""
    return [rng.get_state(i) for i in range(_device_count())]


def set_rng_state_all(states) -> None:
    """Restore every device's state."""
    for i, st in enumerate(states):
        rng.set_state(i, st)


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes autocast may use on ral devices."""
    return [torch.float16, torch.bfloat16]


def current_stream(device=None):
    """The current Stream of a device."""
    from .streams import Stream

    idx = _index(device)
    return Stream._wrap(idx, _current_stream(idx))


def default_stream(device=None):
    """The default stream (id 0) of a device."""
    from .streams import Stream

    return Stream._wrap(_index(device), 0)


def stream(s):
    """Context manager that makes `s` the current stream of its device."""
    from .streams import StreamContext

    return StreamContext(s)


def __getattr__(name):
    if name in ("Stream", "Event", "StreamContext"):
        from . import streams

        return getattr(streams, name)
    raise AttributeError(name)
