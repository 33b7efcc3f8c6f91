"""torch.ral.Stream and torch.ral.Event over the runtime's uniform stream/event layer."""

from __future__ import annotations

import torch

from torch_fl._native import ffi, lib
from torch_fl.core.runtime import check
from torch_fl.device import fork
from torch_fl.device.index import device_index
from torch_fl.device.stream_state import current, set_current
from torch_fl.device.sync import synchronize_event, synchronize_stream

# c10::DeviceType::PrivateUse1: the device_type a torch.Stream of the ral device carries.
PRIVATEUSE1_TYPE = 20


class Stream(torch.Stream):
    """An in-order work queue on a ral device (the plugin's stream, command queue, ...).

    A torch.Stream, as torch.cuda.Stream is, so APIs typed on torch.Stream take it
    (`Tensor.record_stream(s)`); stream_id is the runtime's stream id."""

    def __new__(cls, device=None, priority: int = 0):
        index = device_index(device)
        out = ffi.new("int32_t*")
        check(lib.rt_stream_create(index, out))
        s = torch.Stream.__new__(cls, stream_id=out[0], device_index=index, device_type=PRIVATEUSE1_TYPE)
        s._owned = True
        return s

    def __init__(self, device=None, priority: int = 0):
        pass  # everything happens in __new__ (torch.Stream's fields are read-only)

    @classmethod
    def _wrap(cls, device_index: int, stream_id: int) -> Stream:
        s = torch.Stream.__new__(cls, stream_id=stream_id, device_index=device_index, device_type=PRIVATEUSE1_TYPE)
        s._owned = False
        return s

    def synchronize(self) -> None:
        """Wait until all work queued on this stream is done."""
        synchronize_stream(self.device_index, self.stream_id, "Stream.synchronize")

    def query(self) -> bool:
        """True if the stream is idle."""
        status = lib.rt_stream_query(self.device_index, self.stream_id)
        if status == lib.RAL_ERROR_NOT_READY:
            return False
        check(status)
        return True

    def record_event(self, event: Event | None = None) -> Event:
        """Record an event at the current tail of this stream."""
        event = event or Event()
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait for `event`."""
        event.wait(self)

    def wait_stream(self, other: Stream) -> None:
        """Make later work on this stream wait for all work queued so far on `other`."""
        self.wait_event(other.record_event())

    def __eq__(self, other):
        return isinstance(other, Stream) and (self.device_index, self.stream_id) == (
            other.device_index,
            other.stream_id,
        )

    def __hash__(self):
        return hash((self.device_index, self.stream_id))

    def __repr__(self):
        return f"<torch.ral.Stream device=ral:{self.device_index} id={self.stream_id}>"

    def __del__(self):
        if getattr(self, "_owned", False) and not fork.in_child:
            try:
                lib.rt_stream_destroy(self.device_index, self.stream_id)
            except Exception:
                pass


class StreamContext:
    """`with torch.ral.stream(s):` makes s the current stream of its device."""

    def __init__(self, stream: Stream | None):
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is None:
            return None
        dev = self.stream.device_index
        self.prev = current(dev)
        set_current(dev, self.stream.stream_id)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            set_current(self.stream.device_index, self.prev)


class Event:
    """A marker on a stream: query, wait for, or time work."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.device_index = None
        self.event_id = None

    def _ensure(self, device_index: int) -> None:
        if self.event_id is None:
            out = ffi.new("int32_t*")
            check(lib.rt_event_create(device_index, out))
            self.device_index = device_index
            self.event_id = out[0]

    def record(self, stream: Stream | None = None) -> None:
        """Record this event on a stream (default: the current stream of the current device)."""
        if stream is None:
            stream = current_stream()
        self._ensure(stream.device_index)
        if stream.device_index != self.device_index:  # event ids are per device (CUDA's wording)
            raise RuntimeError(
                f"Event device index {self.device_index} does not match recording stream's device index "
                f"{stream.device_index}."
            )
        check(lib.rt_event_record(self.device_index, self.event_id, stream.stream_id))

    def synchronize(self) -> None:
        """Wait until the recorded work is done."""
        if self.event_id is not None:
            synchronize_event(self.device_index, self.event_id, "Event.synchronize")

    def query(self) -> bool:
        """True if the recorded work is done (or nothing was recorded)."""
        if self.event_id is None:
            return True
        status = lib.rt_event_query(self.device_index, self.event_id)
        if status == lib.RAL_ERROR_NOT_READY:
            return False
        check(status)
        return True

    def wait(self, stream: Stream | None = None) -> None:
        """Make later work on `stream` wait for this event."""
        if self.event_id is None:
            return
        if stream is None:
            stream = current_stream(self.device_index)
        if stream.device_index == self.device_index:
            check(lib.rt_stream_wait_event(stream.device_index, stream.stream_id, self.event_id))
        else:  # a stream of another device: ids are per device, so wait on the host (as the guard)
            self.synchronize()

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds between this event and `end` (both recorded and complete)."""
        if not (self.enable_timing and end.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self.event_id is None or end.event_id is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if self.device_index != end.device_index:
            raise RuntimeError(
                f"elapsed_time between an event of ral:{self.device_index} and one of ral:{end.device_index}: "
                "both events must be on one device"
            )
        out = ffi.new("float*")
        check(lib.rt_event_elapsed_ms(self.device_index, self.event_id, end.event_id, out))
        return float(out[0])

    def __del__(self):
        if getattr(self, "event_id", None) is not None and not fork.in_child:
            try:
                lib.rt_event_destroy(self.device_index, self.event_id)
            except Exception:
                pass


def current_stream(device=None) -> Stream:
    """The current Stream of a device."""
    idx = device_index(device)
    return Stream._wrap(idx, current(idx))


def default_stream(device=None) -> Stream:
    """The default stream (id 0) of a device."""
    return Stream._wrap(device_index(device), 0)


def stream(s: Stream) -> StreamContext:
    """Context manager that makes `s` the current stream of its device."""
    return StreamContext(s)
