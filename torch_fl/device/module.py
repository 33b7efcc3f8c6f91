"""The `torch.ral` module: device queries, synchronization, memory stats, RNG and streams."""

from __future__ import annotations

import torch

from torch_fl._native import lib
from torch_fl.core import runtime as _runtime
from torch_fl.core.runtime import check, device_records
from torch_fl.core.runtime import device_count as _device_count
from torch_fl.device import index as _index
from torch_fl.device import memory_report, rng
from torch_fl.device.index import current_device, device_index, set_device  # noqa: F401 (torch.ral API)
from torch_fl.device.memory import memory_stats_dict
from torch_fl.device.properties import RalDeviceProperties
from torch_fl.device.properties import get_device_properties as _properties
from torch_fl.device.stream_state import set_current
from torch_fl.device.streams import Event, Stream, StreamContext, current_stream, default_stream, stream  # noqa: F401 (torch.ral API)
from torch_fl.device.sync import synchronize_device
from torch_fl.device.sync_debug import get_sync_debug_mode, set_sync_debug_mode  # noqa: F401 (torch.ral API)

# torch.ral.device(n): the context manager that changes the current device.
device = _index.device


def is_available() -> bool:
    """True if at least one ral device is present."""
    return _device_count() > 0


def is_initialized() -> bool:
    """Whether the plugins are loaded in this process (they load lazily, at first device use)."""
    return _runtime.is_initialized()


def init() -> None:
    """Load and initialise every ral plugin now (otherwise the first device use does it)."""
    _runtime.ensure_initialized()


# PyTorch calls torch.<backend>._lazy_init() before a factory with device="ral" (as for CUDA).
_lazy_init = init


def _is_in_bad_fork() -> bool:
    """Whether this process was forked after its parent initialised ral (it must not use ral)."""
    return _runtime.in_bad_fork()


def device_count() -> int:
    """Number of visible ral devices."""
    return _device_count()


def synchronize(device=None) -> None:
    """Wait for all work on a ral device; raises the first asynchronous kernel error."""
    synchronize_device(device_index(device))


def get_device_name(device=None) -> str:
    """Name of a ral device."""
    return device_records()[device_index(device)].name


def get_device_properties(device=None) -> RalDeviceProperties:
    """Name, total memory, compute units and what else the plugin reports of a ral device."""
    return _properties(device_index(device))


def memory_stats(device=None) -> dict:
    """MemoryPool statistics of a device."""
    return memory_stats_dict(device_index(device))


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
    check(lib.rt_reset_peak_stats(device_index(device)))


# torch.cuda's older names for the same figures and reset
reset_max_memory_allocated = reset_max_memory_cached = reset_peak_memory_stats
memory_cached, max_memory_cached = memory_reserved, max_memory_reserved


def is_tf32_supported() -> bool:
    """False: ral kernels compute float32 in float32 (there is no TF32 mode to allow)."""
    return False


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of a device, as torch.cuda.mem_get_info: total is the device's
    memory (or the pool's limit when one is set and smaller), free is what this process's
    pool has not reserved of it (plugins report no live device-wide free figure)."""
    index = device_index(device)
    stats = memory_stats_dict(index)
    total = device_records()[index].total_memory
    limit = stats["limit_bytes"]
    if limit and (not total or limit < total):
        total = limit
    return max(total - stats["reserved_bytes.all.current"], 0), total


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the current ral device computes in bfloat16 (autocast may use it)."""
    return torch.bfloat16 in get_amp_supported_dtype()


def set_stream(stream: Stream) -> None:  # noqa: F811 (torch.cuda.set_stream's parameter name)
    """Make `stream` the current stream of its device in this thread (torch.cuda.set_stream)."""
    if stream is not None:
        set_current(stream.device_index, stream.stream_id)


def empty_cache() -> None:
    """Hand every cached block of every device back to its plugin."""
    for i in range(_device_count()):
        check(lib.rt_empty_cache(i))


def memory_stats_as_nested_dict(device=None) -> dict:
    """memory_stats as nested dicts, split at each "." (torch.cuda's shape)."""
    return memory_report.nested(memory_stats(device))


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A printable table of a device's pool: allocated, reserved, blocks, counters, limit."""
    index = device_index(device)
    return memory_report.summary(index, device_records()[index].name)


def memory_snapshot() -> list[dict]:
    """One pool segment per ral device, with its totals (torch.cuda.memory_snapshot's shape)."""
    return memory_report.snapshot(range(_device_count()))


def reset_accumulated_memory_stats(device=None) -> None:
    """Zero the cumulative counters (allocations, frees, cache hits, plugin calls, OOMs)."""
    check(lib.rt_reset_accumulated_stats(device_index(device)))


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Cap this process's pool on a device at `fraction` of its total memory; allocating past
    it raises torch.OutOfMemoryError (as torch.cuda does). 1.0 removes the cap."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    index = device_index(device)
    total = device_records()[index].total_memory
    # the pool's limit 0 means "no cap": fraction 0 caps at one byte
    limit = 0 if fraction == 1.0 else max(int(fraction * total), 1)
    check(lib.rt_set_memory_limit(index, limit))


def get_per_process_memory_fraction(device=None) -> float:
    """The fraction of a device's memory this process's pool may take (1.0 when uncapped)."""
    index = device_index(device)
    limit = memory_stats_dict(index)["limit_bytes"]
    total = device_records()[index].total_memory
    return 1.0 if not limit or not total else min(limit / total, 1.0)


def can_device_access_peer(device, peer_device) -> bool:
    """False: a ral kernel reads only its own device's buffers; copies between ral devices go
    through the runtime (rt_copy_d2d), not peer access."""
    device_index(device), device_index(peer_device)  # a device that does not exist raises
    return False


class device_of(_index.device):
    """Context manager that makes the device of `obj` current (no-op for a non-ral tensor)."""

    def __init__(self, obj):
        idx = obj.get_device() if obj.device.type in ("ral", "privateuseone") else -1
        self.idx, self.prev = idx, None

    def __enter__(self):
        if self.idx >= 0:
            super().__enter__()

    def __exit__(self, *exc):
        if self.idx >= 0:
            super().__exit__(*exc)


class ExternalStream:
    """Not available: the plugin ABI has no entry that adopts a queue created outside the
    runtime (streams are made by stream_create and owned by the runtime)."""

    def __new__(cls, stream_ptr, device=None):
        raise NotImplementedError(
            "torch.ral.ExternalStream: the ral plugin ABI cannot adopt a native queue created outside "
            "torch_fl; create a torch.ral.Stream (or torch.Stream(device='ral:N')) instead"
        )


def set_memory_limit(limit_bytes: int, device=None) -> None:
    """Cap a device's pool (0 = no cap); like TORCH_FL_MEMORY_LIMIT for one device."""
    check(lib.rt_set_memory_limit(device_index(device), int(limit_bytes)))


def manual_seed(seed: int) -> None:
    """Seed the current ral device."""
    rng.manual_seed(current_device(), seed)


def manual_seed_all(seed: int) -> None:
    """Seed every ral device (torch.manual_seed calls this; it loads no plugin)."""
    rng.manual_seed_all(seed)


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
    return rng.get_state(device_index(device))


def set_rng_state(new_state: torch.Tensor, device=None) -> None:
    """Restore a state from get_rng_state."""
    rng.set_state(device_index(device), new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """RNG states of every device."""
    return [rng.get_state(i) for i in range(_device_count())]


def set_rng_state_all(states) -> None:
    """Restore every device's state."""
    for i, st in enumerate(states):
        rng.set_state(i, st)


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes autocast may use on the current ral device (float16 only where it is native)."""
    from torch_fl.device.amp import supported_dtypes

    return supported_dtypes(current_device())
