"""Host staging of ral tensors for the collective backend: the one place that touches torch_fl internals.

A collective runs on host memory (gloo over TCP). For a host-mappable device (ral:0, the host
plugin) the host side is a zero-copy CPU view of the device buffer; otherwise (ral:1, OpenCL) the
data is copied device -> host before and host -> device after, on a per-device communication
stream that first waits for the work the caller queued on its current stream.
"""

from __future__ import annotations

import threading

import torch

# Every import of torch_fl internals lives here.
from torch_fl._native import ffi, lib
from torch_fl.core.runtime import check
from torch_fl.device.stream_state import current
from torch_fl.tensor.host_copy import host_mappable, host_view
from torch_fl.tensor.ral_tensor import RalTensor


def is_ral(t) -> bool:
    """Whether t is a tensor on a ral device."""
    return type(t) is RalTensor


_COMM_STREAMS: dict[int, int] = {}
_streams_lock = threading.Lock()


def comm_stream(dev: int) -> int:
    """The runtime stream collectives use on ral:dev (created once, like NCCL's internal stream)."""
    s = _COMM_STREAMS.get(dev)
    if s is None:
        with _streams_lock:
            s = _COMM_STREAMS.get(dev)
            if s is None:
                out = ffi.new("int32_t*")
                check(lib.rt_stream_create(dev, out))
                s = _COMM_STREAMS[dev] = out[0]
    return s


class ReadyEvent:
    """An event recorded on a device's current stream when a collective is issued: the data is
    ready once it completes. Recorded by the caller's thread, waited for by the worker's."""

    __slots__ = ("dev", "event")

    def __init__(self, dev: int):
        out = ffi.new("int32_t*")
        check(lib.rt_event_create(dev, out))
        self.dev = dev
        self.event = out[0]
        check(lib.rt_event_record(dev, self.event, current(dev)))

    def wait(self) -> None:
        """Block until the work queued before the collective is done (surfaces its errors)."""
        try:
            check(lib.rt_event_synchronize(self.dev, self.event))
        finally:
            lib.rt_event_destroy(self.dev, self.event)
            self.event = -1


def check_contiguous(t) -> None:
    """Collectives move whole contiguous buffers (as gloo and NCCL require): refuse others."""
    if type(t) is RalTensor and not t.is_contiguous():
        raise ValueError(
            f"torch_fl.distributed: collectives need contiguous tensors, got shape {tuple(t.shape)} "
            f"with strides {t.stride()} on {t.device}; call .contiguous() first"
        )


class Staged:
    """The host side of one ral tensor for the duration of a collective."""

    __slots__ = ("dev", "tensor", "host", "copied")

    def __init__(self, t: RalTensor, read: bool):
        check_contiguous(t)
        self.dev = t._dev
        self.tensor = t  # keeps the device buffer alive until the collective is done
        view = host_view(t)
        self.copied = view is None
        if view is not None:
            self.host = view
            return
        self.host = torch.empty(t.shape, dtype=t.dtype)
        nbytes = t.numel() * t.dtype.itemsize
        if read and nbytes:
            check(
                lib.rt_copy_d2h(
                    self.dev,
                    comm_stream(self.dev),
                    ffi.cast("void*", self.host.data_ptr()),
                    t._buf.ptr,
                    t.storage_offset() * t.dtype.itemsize,
                    nbytes,
                    1,
                )
            )

    def write_back(self) -> None:
        """Put the host result into the device tensor (no-op for a zero-copy view)."""
        if not self.copied:
            return
        t = self.tensor
        nbytes = t.numel() * t.dtype.itemsize
        if nbytes:
            s = comm_stream(self.dev)
            check(
                lib.rt_copy_h2d(
                    self.dev,
                    s,
                    t._buf.ptr,
                    t.storage_offset() * t.dtype.itemsize,
                    ffi.cast("void*", self.host.data_ptr()),
                    nbytes,
                )
            )
            check(lib.rt_stream_synchronize(self.dev, s))


def stage(t: torch.Tensor, read: bool = True):
    """(host tensor to hand to gloo, Staged or None): CPU tensors pass through unchanged."""
    if type(t) is not RalTensor:
        return t, None
    s = Staged(t, read)
    return s.host, s


def mappable(dev: int) -> bool:
    """Whether ral:dev is host-mappable (collectives then run zero-copy)."""
    return host_mappable(dev)


def resize_buffer(t: RalTensor, nbytes: int) -> None:
    """Give t's device buffer a new size in place, like `untyped_storage().resize_()`: every view
    sharing the buffer sees the change. The old contents are not kept (FSDP2 refills them)."""
    buf = t._buf
    if buf.nbytes == nbytes:
        return
    buf.reallocate(nbytes, current(buf.device))
