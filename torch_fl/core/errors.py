"""Every error torch_fl raises, and the one table mapping runtime status codes to them.

Torch-free, so light tools (ralctl) and the runtime binding can raise them without torch.
"""

from __future__ import annotations

import re


class RalError(RuntimeError):
    """Base class of every error torch_fl raises; carries the status name and message."""

    status_name = "RAL_ERROR"

    def __init__(self, message: str, *, plugin: str | None = None, op: str | None = None):
        super().__init__(message)
        self.plugin = plugin
        self.op = op


class ManifestError(RalError, ValueError):
    """A kernel manifest failed validation; the message names the file, the entry and the field."""

    status_name = "RAL_ERROR_INVALID_MANIFEST"


class InvalidArgumentError(RalError, ValueError):
    """A malformed argument reached the runtime or a plugin."""

    status_name = "RAL_ERROR_INVALID_ARGUMENT"


class OutOfMemoryError(RalError, MemoryError):
    """A ral device (or its TORCH_FL_MEMORY_LIMIT) could not satisfy an allocation.

    torch_fl.OutOfMemoryError (device/errors.py) refines it into a torch.OutOfMemoryError.
    """

    status_name = "RAL_ERROR_OUT_OF_MEMORY"


class InvalidPointerError(RalError):
    """The SecureContext refused a pointer/offset/extent that is not in a live allocation."""

    status_name = "RAL_ERROR_INVALID_POINTER"


class UnsupportedError(RalError, NotImplementedError):
    """The plugin does not support the request (dtype, layout, feature)."""

    status_name = "RAL_ERROR_UNSUPPORTED"


def kind_refused(op: str, kind: str, remedy: str = "keep this work on CPU (x.cpu())") -> UnsupportedError:
    """The error for a kind of tensor ral devices do not carry (a sparse layout, quantized data)."""
    return UnsupportedError(f"RAL_ERROR_UNSUPPORTED: {op}: ral devices do not carry {kind} tensors; {remedy}", op=op)


class KernelError(RalError):
    """A vendor kernel reported failure; the message names the plugin, the op and the reason."""

    status_name = "RAL_ERROR_KERNEL_FAILED"


class DeviceLostError(RalError):
    """The device disappeared (its plugin was unloaded or the hardware went away)."""

    status_name = "RAL_ERROR_DEVICE_LOST"


class DeviceHangError(DeviceLostError):
    """A wait on a device (synchronize, a synchronous copy) did not return within the hang
    timeout (TORCH_FL_DEVICE_TIMEOUT, torch_fl.set_device_timeout); the device is marked lost
    and later uses raise DeviceLostError, while other devices keep working."""

    status_name = "RAL_ERROR_DEVICE_HANG"


class MissingDependencyError(RalError):
    """A vendor runtime library a plugin needs is absent."""

    status_name = "RAL_ERROR_MISSING_DEPS"


class AbiMismatchError(RalError):
    """A plugin was built for another ABI major version."""

    status_name = "RAL_ERROR_ABI_MISMATCH"


class CompileError(RalError):
    """A plugin's run-time compiler rejected generated source."""

    status_name = "RAL_ERROR_COMPILE_FAILED"


class InternalError(RalError):
    """An unexpected state inside the runtime or a plugin."""

    status_name = "RAL_ERROR_INTERNAL"


class NotReadyError(RalError):
    """Work is still pending (query on a busy stream or event)."""

    status_name = "RAL_ERROR_NOT_READY"


class LoadFailedError(RalError):
    """A plugin library could not be loaded."""

    status_name = "RAL_ERROR_LOAD_FAILED"


class IndexOutOfRangeError(InvalidArgumentError, IndexError):
    """An index outside its dimension reached a kernel (found on the device, perhaps at a
    later synchronization); an IndexError like CPU's and CUDA's."""


# Plugins word an out-of-range index like PyTorch's CPU kernels do ("index 7 is out of
# bounds for dimension 0 with size 5"; the host plugin says "out of range"; nll_loss on
# the host names the target).
_INDEX_FAULT = re.compile(r"\b(?:index|target) -?\d+ is out of (?:bounds|range)\b")


# Status codes of ral_plugin.h, in enum order. Index = code.
STATUS_CLASSES: list[type[RalError]] = [
    RalError,  # RAL_OK never raises
    InvalidArgumentError,
    OutOfMemoryError,
    InvalidPointerError,
    UnsupportedError,
    KernelError,
    DeviceLostError,
    MissingDependencyError,
    AbiMismatchError,
    CompileError,
    InternalError,
    NotReadyError,
    LoadFailedError,
    DeviceHangError,  # runtime-only status 13 (ral_runtime.h)
]


def refine_status_class(cls: type[RalError]) -> None:
    """Raise `cls` (a subclass of the status class it refines) for that status from now on."""
    for code, base in enumerate(STATUS_CLASSES):
        if base is not RalError and issubclass(cls, base):
            STATUS_CLASSES[code] = cls
            return
    raise ValueError(f"{cls.__name__} refines no status class")


def error_for_status(status: int, message: str, **context) -> RalError:
    """Build the exception for a runtime status code and its message."""
    cls = STATUS_CLASSES[status] if 0 < status < len(STATUS_CLASSES) else RalError
    if cls is InvalidArgumentError and _INDEX_FAULT.search(message):
        cls = IndexOutOfRangeError
    if not message.startswith("RAL_ERROR"):
        message = f"{cls.status_name}: {message}"
    # An error raised at a synchronization point was recorded by the runtime's
    # rt_plugin_fail ("STATUS: [plugin] op (kernel symbol): detail", launch.c) when the
    # kernel ran; the caller of the sync does not know whose it was, the message does.
    found = _PLUGIN_OP.match(message)
    if found:
        context.setdefault("plugin", found["plugin"])
        if found["op"]:
            context.setdefault("op", found["op"])
    return cls(message, **context)


_PLUGIN_OP = re.compile(r"RAL_ERROR\w*: \[(?P<plugin>[^\]\s]+)\] (?:(?P<op>\S+) \(kernel )?")


class ForkedChildError(RuntimeError):
    """A process forked after its parent initialised ral tried to use a ral device.

    Worded after CUDA's "Cannot re-initialize CUDA in forked subprocess".
    """

    MESSAGE = (
        "Cannot re-initialize ral in forked subprocess ({what}). The parent process had initialised "
        "ral devices, and the device runtime (plugin threads, contexts, mappings) does not survive fork(). "
        "To use ral with multiprocessing, use the 'spawn' start method (e.g. DataLoader(..., "
        "multiprocessing_context='spawn')) or keep worker code on CPU."
    )

    def __init__(self, what: str):
        super().__init__(self.MESSAGE.format(what=what))
