"""ral_mode(device): run unmodified CPU code on a ral device.

A TorchFunctionMode (above autograd, so uploads are differentiable):
  - factories that name no device land on the device;
  - CPU tensors that meet a computing op are uploaded once, cached until their version
    counter (or data pointer) changes or they die; tensors that require grad go through a
    differentiable upload whose backward brings the gradient back to CPU;
  - ops that mutate a CPU tensor (optimizer steps, `x += y` on a CPU tensor) run on CPU,
    downloading any device operands, so CPU state stays where the user put it.
"""

from __future__ import annotations

import threading
import weakref

import torch
from torch.overrides import TorchFunctionMode

from .tensor import RalTensor
from .transfer import to_cpu, to_device

_PASSTHROUGH_NAMES = {
    "size",
    "dim",
    "numel",
    "stride",
    "storage_offset",
    "is_contiguous",
    "element_size",
    "nelement",
    "ndimension",
    "data_ptr",
    "cpu",
    "numpy",
    "tolist",
    "item",
    "to",
    "type",
    "type_as",
    "__repr__",
    "__format__",
    "__str__",
    "__len__",
    "__array__",
    "__reduce_ex__",
    "__deepcopy__",
    "requires_grad_",
    "register_hook",
    "register_post_accumulate_grad_hook",
    "retain_grad",
    "backward",
    "detach",
    "detach_",
    "untyped_storage",
    "storage",
    "is_floating_point",
    "is_complex",
    "get_device",
    "__hash__",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "dim_order",
    "is_shared",
    "share_memory_",
    "pin_memory",
    "is_pinned",
    "__setstate__",
    "_is_view",
    "_base",
    "has_names",
    "is_nonzero",
}
_FACTORIES = {
    torch.empty,
    torch.zeros,
    torch.ones,
    torch.full,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.arange,
    torch.linspace,
    torch.logspace,
    torch.eye,
    torch.tensor,
    torch.as_tensor,
    torch.scalar_tensor,
    torch.empty_strided,
    torch.range,
}
_PASS, _FACTORY, _INPLACE, _COMPUTE = range(4)
_KINDS: dict = {}

# Upload cache: id(cpu tensor) -> (weakref, version, data_ptr, device, device copy).
_CACHE: dict = {}
_cache_lock = threading.Lock()
stats = {"uploads": 0, "cache_hits": 0}


def _kind(func) -> int:
    k = _KINDS.get(func)
    if k is None:
        name = getattr(func, "__name__", "")
        if func in _FACTORIES:
            k = _FACTORY
        elif name in _PASSTHROUGH_NAMES or name in ("__get__", "__set__"):
            k = _PASS
        elif (
            (name.endswith("_") and not name.endswith("__"))
            or name in ("__setitem__",)
            or (name.startswith("__i") and name.endswith("__"))
        ):
            k = _INPLACE
        else:
            k = _COMPUTE
        _KINDS[func] = k
    return k


class _Upload(torch.autograd.Function):
    """Differentiable CPU -> device move whose device copy comes from the cache."""

    @staticmethod
    def forward(ctx, cpu, device_copy):
        return device_copy.view_as(device_copy)

    @staticmethod
    def backward(ctx, grad):
        return to_cpu(grad), None


def _cached_copy(t: torch.Tensor, dev: int) -> RalTensor:
    try:
        version = t._version
    except RuntimeError:  # inference tensors carry no version counter: do not cache
        return to_device(t.detach(), dev)
    key = id(t)
    ptr = t.data_ptr()
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is t and hit[1] == version and hit[2] == ptr and hit[3] == dev:
        stats["cache_hits"] += 1
        return hit[4]
    copy = to_device(t.detach(), dev)
    stats["uploads"] += 1
    with _cache_lock:
        _CACHE[key] = (weakref.ref(t, lambda _r, k=key: _CACHE.pop(k, None)), version, ptr, dev, copy)
    return copy


def upload(t: torch.Tensor, dev: int) -> RalTensor:
    """The device twin of a CPU tensor: cached, and differentiable if t requires grad."""
    copy = _cached_copy(t, dev)
    if t.requires_grad and torch.is_grad_enabled():
        return _Upload.apply(t, copy)
    return copy


def _is_cpu_tensor(a) -> bool:
    return isinstance(a, torch.Tensor) and type(a) is not RalTensor and a.device.type == "cpu"


def _map(v, fn):
    if isinstance(v, torch.Tensor):
        return fn(v)
    if type(v) is list or type(v) is tuple:
        return type(v)(_map(x, fn) for x in v)
    return v


class ral_mode(TorchFunctionMode):
    """`with torch_fl.ral_mode("ral:0"):` runs the enclosed PyTorch code on a ral device."""

    def __init__(self, device="ral:0"):
        super().__init__()
        from .device_module import _index

        d = torch.device(device) if not isinstance(device, int) else torch.device("ral", device)
        if d.type not in ("ral", "privateuseone"):
            raise ValueError(f"ral_mode needs a ral device, got {device!r}")
        self.index = _index(d)  # raises a clear error for a device that does not exist
        self.device = torch.device("ral", self.index)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _KINDS.get(func)
        if kind is None:
            kind = _kind(func)
        if kind == _PASS:
            return func(*args, **kwargs)
        if kind == _FACTORY:
            if kwargs.get("device") is None:
                kwargs = dict(kwargs, device=self.device)
            return func(*args, **kwargs)
        if kind == _INPLACE and args and _is_cpu_tensor(args[0]) or _is_cpu_tensor(kwargs.get("out")):
            down = lambda t: to_cpu(t) if type(t) is RalTensor else t  # noqa: E731
            return func(*_map(list(args), down), **{k: _map(v, down) for k, v in kwargs.items()})
        dev = self.index

        def up(t):
            # 0-dim CPU tensors are uploaded too: many ops (meshgrid, quantile's q, masked_fill's
            # value) insist on one device, and everything in an unmodified script is on CPU.
            if type(t) is RalTensor or t.device.type != "cpu":
                return t
            return upload(t, dev)

        return func(*_map(list(args), up), **{k: _map(v, up) for k, v in kwargs.items()})
