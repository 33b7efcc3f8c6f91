"""Lazy modules on ral: `UninitializedParameter`/`UninitializedBuffer` stay uninitialized
through `.to("ral:N")`, so `nn.LazyLinear(3).to("ral:0")` materializes at its first forward.

On CUDA an uninitialized parameter keeps its class because `Module._apply` replaces its data in
place (`param.data = param.to(dev)`). A RalTensor is a wrapper subclass: `_apply` swaps the
whole object instead (`swap_tensors(param, Parameter(param.to(dev)))`), so the class the swap
brings in must already be an uninitialized one. `register()` makes the conversion methods that
UninitializedTensorMixin allows (`to`, `cuda`, `half`, ...) return such a class when their
result is a RalTensor.
"""

from __future__ import annotations

import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, UninitializedTensorMixin

from torch_fl.core.errors import UnsupportedError
from torch_fl.tensor.ral_tensor import RalTensor

_T = torch.Tensor
# The allowed methods that return a converted copy (the rest return self or no tensor).
_CONVERSIONS = {_T.to, _T.cuda, _T.cpu, _T.half, _T.float, _T.double, _T.char, _T.short, _T.int, _T.long}


class _RalUninitialized:
    """What the ral uninitialized parameter and buffer add to torch's mixin."""

    # Parameter(t) runs t.detach().requires_grad_(); Module._apply builds one in its swap.
    _allowed_methods = [*UninitializedTensorMixin._allowed_methods, _T.detach, _T.requires_grad_]
    _is_param_when_done = False

    def __new__(cls, requires_grad=False, device=None, dtype=None, persistent=True):
        # The signature torch's classes have (__deepcopy__ and __reduce_ex__ call it too).
        empty = torch.empty(0, device=device, dtype=dtype)  # on ral inside ral_mode
        if type(empty) is not RalTensor:
            if device is not None:
                raise UnsupportedError(f"{cls.__name__} lives on a ral device, not {empty.device}")
            empty = torch.empty(0, device="ral:0", dtype=dtype)
        ret = _rewrap(cls, empty, requires_grad)
        if not cls._is_param_when_done:
            ret.persistent = persistent
        return ret

    def detach(self):
        """A new uninitialized tensor of the same class (Parameter() requires that)."""
        return _rewrap(type(self), self, False)

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self.device, self.dtype)
        return memo[id(self)]

    @property
    def data(self):
        """The empty payload as a plain RalTensor (torch's ops on self would ask for its shape)."""
        return _rewrap(RalTensor, self, False)

    @data.setter
    def data(self, new):
        RalTensor.data.__set__(self, new)

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Give the tensor its shape on its ral device: it becomes a plain RalTensor
        (a parameter one for a parameter), as torch's turns into Parameter/Tensor."""
        dev = torch.device(device) if device is not None else self.device
        if dev.type != "ral":
            raise UnsupportedError(
                f"cannot materialize {type(self).__name__} on {dev}: it lives on {self.device}; "
                "move the module there before its first forward"
            )
        is_param = self._is_param_when_done
        self.data = torch.empty(shape, device=dev, dtype=dtype or self.dtype)
        self.__class__ = RalTensor
        if is_param:
            self._is_param = True


class RalUninitializedParameter(_RalUninitialized, UninitializedParameter, RalTensor):
    """An UninitializedParameter on a ral device."""

    _is_param_when_done = True


class RalUninitializedBuffer(_RalUninitialized, UninitializedBuffer, RalTensor):
    """An UninitializedBuffer on a ral device."""


def _rewrap(cls, t: RalTensor, requires_grad: bool):
    # An uninitialized tensor is always the empty 1-d tensor (its `shape` raises on purpose).
    return RalTensor.__new__(cls, t._buf, (0,), (1,), 0, t.dtype, requires_grad)


_original = UninitializedTensorMixin.__dict__["__torch_function__"]


def _keep_uninitialized(cls, func, types, args=(), kwargs=None):
    if func not in _CONVERSIONS:
        return _original.__func__(cls, func, types, args, kwargs)
    kwargs = kwargs or {}
    if isinstance(args[0], _RalUninitialized):
        # Convert the plain payload: the copy kernels read `shape`, which raises here.
        with torch._C.DisableTorchFunctionSubclass():
            out = func(args[0].data, *args[1:], **kwargs)
    elif issubclass(cls, torch.nn.Parameter):
        out = _original.__func__(cls, func, types, args, kwargs)  # exactly torch's (a plain result)
    else:
        # torch's path for a buffer (Tensor.__torch_function__), whose as_subclass step a
        # RalTensor result cannot take.
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if type(out) is not RalTensor:
            return torch._tensor._convert(out, cls)
    if type(out) is RalTensor:
        kind = RalUninitializedParameter if issubclass(cls, UninitializedParameter) else RalUninitializedBuffer
        return _rewrap(kind, out, False)
    return out  # off ral: a ral uninitialized tensor's conversion gives the plain tensor


def _ral_aware_new(base, kind):
    """`base.__new__` that builds `kind` where its empty payload lands on ral: a lazy module
    made with `device="ral:N"`, or inside ral_mode (whose factories allocate on the device)."""
    original = base.__new__

    def __new__(cls, *args, **kwargs):
        if cls is base:
            device, dtype = kwargs.get("device"), kwargs.get("dtype")
            if len(args) > 1:
                device = args[1]
            if len(args) > 2:
                dtype = args[2]
            if type(torch.empty(0, device=device, dtype=dtype)) is RalTensor:
                return kind(*args, **kwargs)
        return original(cls, *args, **kwargs)

    __new__.__ral_aware__ = True
    return __new__


def register() -> None:
    """Install the conversion hook on torch's UninitializedTensorMixin and ral-aware
    constructors on its two classes (once per process)."""
    if UninitializedTensorMixin.__dict__["__torch_function__"] is _original:
        UninitializedTensorMixin.__torch_function__ = classmethod(_keep_uninitialized)
    for base, kind in (
        (UninitializedParameter, RalUninitializedParameter),
        (UninitializedBuffer, RalUninitializedBuffer),
    ):
        if not getattr(base.__new__, "__ral_aware__", False):
            base.__new__ = _ral_aware_new(base, kind)
