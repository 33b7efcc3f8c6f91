"""The one way a kernel call reaches the runtime: rt_launch on a stream, errors raised.

Both the vendor tier (manifest kernels) and the jit tier (generated kernels) launch here;
the call itself is encoded by packing.py.
"""

from __future__ import annotations

from torch_fl._native import ffi, lib
from torch_fl.core.runtime import raise_status
from torch_fl.device.stream_state import current
from torch_fl.tiers.packing import pack_call


def launch(dev: int, stream: int, handle: int, packed, n: int, floats, strings_c, name_c, plugin: str, op: str):
    """rt_launch one packed call (cffi arrays) on a stream; raise the runtime's error on failure."""
    status = lib.rt_launch(dev, stream, handle, packed, n, floats, strings_c, name_c)
    if status:
        raise_status(status, plugin=plugin, op=op)


def launch_packed(dev: int, handle: int, packed: list, floats: list, strings: list, name_c, plugin: str, op: str):
    """Launch a call packed into Python lists on the device's current stream."""
    if strings:
        keep = [ffi.new("char[]", s.encode()) for s in strings]
        strings_c = ffi.new("char*[]", keep)
    else:
        strings_c = ffi.NULL
    floats_c = ffi.new("double[]", floats) if floats else ffi.NULL
    launch(
        dev, current(dev), handle, ffi.new("int64_t[]", packed), len(packed), floats_c, strings_c, name_c, plugin, op
    )


def call(dev, handle, n_out, tensors, scalars, name_c, plugin, op) -> None:
    """Pack and launch a generated kernel's call: `tensors` are (tensor, shape, strides),
    the n_out outputs first; `scalars` are (ABI tag, value)."""
    packed, floats = pack_call(n_out, tensors, scalars)
    launch_packed(dev, handle, packed, floats, [], name_c, plugin, op)
