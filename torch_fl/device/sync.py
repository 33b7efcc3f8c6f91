"""Every wait for device work goes through here, so observers (the tracer) see each one."""

from __future__ import annotations

from torch_fl._native import lib
from torch_fl.core.runtime import check
from torch_fl.device.stream_state import current

# Sync observers (the tracer): callables (device, reason). Empty unless tracing.
SYNC_OBSERVERS: list = []


def notify(dev: int, reason: str) -> None:
    """Tell the observers that the host is about to wait on ral:dev (no wait here)."""
    for obs in SYNC_OBSERVERS:
        obs(dev, reason)


def synchronize_stream(dev: int, stream: int, reason: str = "stream") -> None:
    """Wait for one stream of the device; surfaces asynchronous kernel errors."""
    if SYNC_OBSERVERS:
        notify(dev, reason)
    check(lib.rt_stream_synchronize(dev, stream))


def copy_to_host_and_wait(dev: int, stream: int, dst, src: int, offset: int, nbytes: int, reason: str) -> None:
    """Copy device bytes into host memory and wait for the stream, in one runtime call (a
    copy then synchronize_stream costs `.item()` two trips through Python and cffi)."""
    if SYNC_OBSERVERS:
        notify(dev, reason)
    check(lib.rt_copy_d2h(dev, stream, dst, src, offset, nbytes, 1))


def synchronize(dev: int, reason: str = "stream") -> None:
    """Wait for the device's current stream; surfaces asynchronous kernel errors."""
    synchronize_stream(dev, current(dev), reason)


def synchronize_device(dev: int, reason: str = "torch.ral.synchronize") -> None:
    """Wait for every stream of the device; raises the first asynchronous kernel error."""
    if SYNC_OBSERVERS:
        notify(dev, reason)
    check(lib.rt_device_synchronize(dev))


def synchronize_event(dev: int, event: int, reason: str = "event") -> None:
    """Wait for a recorded event of the device."""
    if SYNC_OBSERVERS:
        notify(dev, reason)
    check(lib.rt_event_synchronize(dev, event))


def set_device_timeout(seconds: float) -> None:
    """Fail any wait on a device that runs past `seconds` with torch_fl.DeviceHangError (0 waits forever).

    The initial value is $TORCH_FL_DEVICE_TIMEOUT, else 300 s. The device whose wait timed out is
    marked lost; other devices keep working (docs/reliability.md, "Trust boundaries")."""
    check(lib.rt_set_device_timeout(float(seconds)))


def device_timeout() -> float:
    """The hang timeout of waits on a device, in seconds (0: none)."""
    return lib.rt_device_timeout()
