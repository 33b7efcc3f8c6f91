"""RalTensor: a wrapper subclass whose payload is a device Buffer plus sizes/strides/offset."""

from __future__ import annotations

import torch

from torch_fl.device.memory import Buffer
from torch_fl.tensor.host_copy import to_cpu
from torch_fl.tensor.serialization import reduce_ral_tensor

_DEVICES: list[torch.device] = []


def torch_device(index: int) -> torch.device:
    """The cached torch.device('ral', index)."""
    while len(_DEVICES) <= index:
        _DEVICES.append(torch.device("ral", len(_DEVICES)))
    return _DEVICES[index]


_make = torch.Tensor._make_wrapper_subclass
_modes_on = torch._C._is_torch_function_mode_enabled
_NoTorchFunction = torch._C.DisableTorchFunction


def outside_modes(fn):
    """Run fn with torch-function modes (ral_mode) off: torch_fl's own tensor plumbing
    must create CPU tensors where it says CPU, even inside a user's ral_mode block."""

    def wrapper(*args, **kwargs):
        if _modes_on():
            with _NoTorchFunction():
                return fn(*args, **kwargs)
        return fn(*args, **kwargs)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class RalTensor(torch.Tensor):
    """A tensor on a ral device. No torch storage: `_buf` is the device allocation.

    Views share `_buf`; sizes, strides and storage_offset (in elements) live in the wrapper.
    """

    _buf: Buffer
    _dev: int
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, buf, size, stride, offset, dtype, requires_grad=False):
        t = _make(
            cls,
            size,
            strides=stride,
            storage_offset=offset,
            dtype=dtype,
            device=torch_device(buf.device),
            requires_grad=requires_grad,
        )
        t._buf = buf
        t._dev = buf.device
        return t

    _sig = None

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if _modes_on():
            with _NoTorchFunction():
                return _dispatch(func, args, kwargs or {})
        return _dispatch(func, args, kwargs or {})

    def __tensor_flatten__(self):
        return ["_flat_payload"], (self._buf, self.dtype)

    @property
    def _flat_payload(self):
        # Subclass-aware machinery (swap_tensors, torch.compile) asks for inner tensors; the
        # payload is device memory, so expose it as an aliasing RalTensor of the same layout.
        return wrap(self._buf, self.shape, self.stride(), self.storage_offset(), self.dtype)

    @staticmethod
    def __tensor_unflatten__(inner_tensors, meta, outer_size, outer_stride):
        inner = inner_tensors["_flat_payload"]
        return wrap(inner._buf, outer_size, outer_stride, inner.storage_offset(), inner.dtype)

    @outside_modes
    def __repr__(self, *, tensor_contents=None):
        body = repr(to_cpu(self).detach())
        body = body[len("tensor(") : -1] if body.startswith("tensor(") else body
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"tensor({body}, device='{self.device}'{grad})"

    @outside_modes
    def __reduce_ex__(self, protocol):
        return reduce_ral_tensor(self)

    @outside_modes
    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = self.clone()
        if self.requires_grad:
            new.requires_grad_(True)
        memo[id(self)] = new
        return new

    @property
    def data(self):
        """The tensor without autograd history (shares the buffer)."""
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, new):
        # The payload lives on the Python object, which Tensor.data's setter does not copy.
        torch.Tensor.data.__set__(self, new)
        self._buf = new._buf
        self._dev = new._dev
        self._sig = None

    @outside_modes
    def numpy(self, *, force: bool = False):
        """Copy to host and return a NumPy array (like a CUDA tensor's .cpu().numpy())."""
        return to_cpu(self.detach()).numpy()

    @outside_modes
    def tolist(self):
        """Copy to host and return nested Python lists."""
        return to_cpu(self.detach()).tolist()


_STRIDED = torch.strided


def wrap(buf: Buffer, size, stride, offset: int, dtype: torch.dtype, sig=None) -> RalTensor:
    """Make a RalTensor over an existing buffer (a new tensor or a view).

    `sig` is the router's signature of the tensor (device, shape, dtype, contiguous) when
    the caller already knows it; otherwise it is computed on first use.
    """
    dev = buf.device
    try:
        device = _DEVICES[dev]
    except IndexError:
        device = torch_device(dev)
    # Positional arguments: keyword parsing is a measurable share of the per-op cost.
    t = _make(RalTensor, size, stride, offset, None, dtype, _STRIDED, device)
    t._buf = buf
    t._dev = dev
    if sig is not None:
        t._sig = sig
    return t


def _no_dispatcher(func, args, kwargs):
    raise RuntimeError("torch_fl: the dispatcher is not installed (import torch_fl, not torch_fl.tensor alone)")


# The function every aten op on a RalTensor goes to. The tensor class sits below the
# dispatcher in the layers, so the dispatcher installs itself here when it is imported.
_dispatch = _no_dispatcher


def set_dispatcher(fn) -> None:
    """Install the function that runs every aten op on a RalTensor (dispatch/entry.py)."""
    global _dispatch
    _dispatch = fn
