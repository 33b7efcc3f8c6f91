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

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from torch_fl.device.index import parse_device
from torch_fl.tensor.grad_home import differentiable_upload
from torch_fl.tensor.host_copy import to_cpu
from torch_fl.tensor.ral_tensor import RalTensor
from torch_fl.tensor.transfer import to_device

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
# Random number producers. Under ral_mode(rng="cpu") (the default) they draw from PyTorch's
# CPU generator and upload the result, so an unmodified script gives CPU's numbers exactly.
_RNG_INPLACE_NAMES = {
    "uniform_",
    "normal_",
    "bernoulli_",
    "random_",
    "exponential_",
    "geometric_",
    "log_normal_",
    "cauchy_",
}
_RNG_FUNCTIONS = {
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.rand_like,
    torch.randn_like,
    torch.randint_like,
    torch.normal,
    torch.bernoulli,
    torch.multinomial,
    torch.poisson,
}
_PASS, _FACTORY, _INPLACE, _COMPUTE, _INIT, _RNG_INPLACE, _RNG, _DROPOUT = range(8)
_KINDS: dict = {}

# Upload cache: cpu tensor (held weakly, by identity) -> (version, data_ptr, device, device copy).
_CACHE = WeakIdKeyDictionary()
_cache_lock = threading.Lock()
stats = {"uploads": 0, "cache_hits": 0}


def _kind(func) -> int:
    k = _KINDS.get(func)
    if k is None:
        name = getattr(func, "__name__", "")
        if func in _RNG_FUNCTIONS:
            k = _RNG
        elif name in _RNG_INPLACE_NAMES and func is getattr(torch.Tensor, name, None):
            k = _RNG_INPLACE
        elif getattr(func, "__module__", "") == "torch.nn.init":
            k = _INIT
        elif func is torch.nn.functional.dropout:
            k = _DROPOUT
        elif func in _FACTORIES:
            k = _FACTORY
        elif name in _PASSTHROUGH_NAMES or name in ("__get__", "__set__"):
            k = _PASS
        elif func is torch.autograd.grad or func is torch.autograd.backward:
            k = _PASS  # its inputs are graph nodes to differentiate for, not data to upload
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


def _cached_copy(t: torch.Tensor, dev: int) -> RalTensor:
    try:
        version = t._version
    except RuntimeError:  # inference tensors carry no version counter: do not cache
        return to_device(t.detach(), dev)
    ptr = t.data_ptr()
    hit = _CACHE.get(t)
    if hit is not None and hit[0] == version and hit[1] == ptr and hit[2] == dev:
        stats["cache_hits"] += 1
        return hit[3]
    copy = to_device(t.detach(), dev)
    stats["uploads"] += 1
    with _cache_lock:
        _CACHE[t] = (version, ptr, dev, copy)
    return copy


def _version_of(t) -> int:
    try:
        return t._version
    except RuntimeError:  # inference tensors carry no version counter
        return -1


# Functions that update running statistics in place without an in-place op that
# autograd's version counter sees: func -> (running_mean, running_var positions and names),
# and the flag saying whether they update (position, name).
_RUNNING_STATS = {
    torch.nn.functional.batch_norm: (((1, "running_mean"), (2, "running_var")), (5, "training")),
    torch.nn.functional.instance_norm: (((1, "running_mean"), (2, "running_var")), (5, "use_input_stats")),
    torch.batch_norm: (((3, "running_mean"), (4, "running_var")), (5, "training")),
    torch.native_batch_norm: (((3, "running_mean"), (4, "running_var")), (5, "training")),
    torch._native_batch_norm_legit: (((3, "running_mean"), (4, "running_var")), (5, "training")),
    torch.instance_norm: (((3, "running_mean"), (4, "running_var")), (5, "use_input_stats")),
}


def _arg(args, kwargs, pos, name, default=None):
    """Argument `name` of a Python-level call, given by position or keyword."""
    return args[pos] if len(args) > pos else kwargs.get(name, default)


def _mutated_buffers(func, args, kwargs) -> list:
    """CPU tensors a function updates in place without an in-place op visible to autograd's
    version counter: batch and instance norm's running statistics in training."""
    spec = _RUNNING_STATS.get(func)
    if spec is None:
        return []
    stats, (flag_pos, flag_name) = spec
    # F.instance_norm defaults use_input_stats=True; the others have no default to miss
    if not _arg(args, kwargs, flag_pos, flag_name, func is torch.nn.functional.instance_norm):
        return []
    found = [_arg(args, kwargs, pos, name) for pos, name in stats]
    return [t for t in found if isinstance(t, torch.Tensor)]


def _write_back(t: torch.Tensor, twin: RalTensor) -> None:
    """An op mutated the device twin of a CPU tensor (batch_norm's running stats, an in-place
    op buried in a function): copy the new values home, and keep the twin cached as current."""
    with torch.no_grad():
        t.copy_(to_cpu(twin.detach()))
    hit = _CACHE.get(t)
    if hit is not None:
        _CACHE[t] = (t._version, hit[1], hit[2], hit[3])


def upload(t: torch.Tensor, dev: int) -> RalTensor:
    """The device twin of a CPU tensor: cached, and differentiable if t requires grad."""
    copy = _cached_copy(t, dev)
    if t.requires_grad and torch.is_grad_enabled():
        return differentiable_upload(t, copy)
    return copy


def _has_cpu_tensor(args, kwargs) -> bool:
    """Whether any (possibly list-nested) argument is a CPU tensor; the common case in a
    device-resident computation is no, and then the mode adds no per-argument work."""
    for a in args:
        ta = type(a)
        if ta is RalTensor:
            continue
        if ta is list or ta is tuple:
            if _has_cpu_tensor(a, {}):
                return True
        elif isinstance(a, torch.Tensor) and a.device.type == "cpu":
            return True
    for v in kwargs.values():
        if isinstance(v, (torch.Tensor, list, tuple)) and _has_cpu_tensor((v,), {}):
            return True
    return False


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

    def __init__(self, device="ral:0", rng: str = "cpu"):
        super().__init__()
        if rng not in ("cpu", "device"):
            raise ValueError(f"rng must be 'cpu' (CPU generator, CPU-identical numbers) or 'device', got {rng!r}")
        self.rng = rng
        index = parse_device(device)  # raises a clear error for a device that does not exist
        if index is None:
            raise ValueError(f"ral_mode needs a ral device, got {device!r}")
        self.index = index
        self.device = torch.device("ral", self.index)

    def _cpu_rng(self, kind, func, args, kwargs):
        """Run a random op on CPU (PyTorch's generator and algorithm), then place the result."""

        def down(t):
            return to_cpu(t) if type(t) is RalTensor else t

        if kind == _RNG_INPLACE:
            target = args[0]
            if type(target) is not RalTensor:
                return func(*args, **kwargs)
            host = torch.empty(target.shape, dtype=target.dtype)
            getattr(host, func.__name__)(*_map(list(args[1:]), down), **{k: _map(v, down) for k, v in kwargs.items()})
            target.copy_(host)
            return target
        if kind == _DROPOUT:
            x = _arg(args, kwargs, 0, "input")
            p = _arg(args, kwargs, 1, "p", 0.5)
            training = _arg(args, kwargs, 2, "training", True)
            inplace = _arg(args, kwargs, 3, "inplace", False)
            if type(x) is not RalTensor or not training or p == 0 or p == 1 or inplace:
                return func(*args, **kwargs)
            # CPU's own recipe (aten _dropout_impl): a Bernoulli(1-p) mask scaled by 1/(1-p).
            noise = torch.empty(x.shape, dtype=x.dtype).bernoulli_(1 - p).div_(1 - p)
            return x * upload(noise, self.index)
        device = kwargs.get("device")
        if device is not None and torch.device(device).type not in ("ral", "privateuseone"):
            return func(*args, **kwargs)
        cpu_kwargs = {k: _map(v, down) for k, v in kwargs.items() if k != "device"}
        result = func(*_map(list(args), down), **cpu_kwargs)
        requires_grad = kwargs.get("requires_grad", False)
        out = to_device(result.detach(), self.index)
        return out.requires_grad_(True) if requires_grad else out

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _KINDS.get(func)
        if kind is None:
            kind = _kind(func)
        if kind == _PASS:
            return func(*args, **kwargs)
        if kind == _INIT:
            target = _arg(args, kwargs, 0, "tensor")
            if self.rng == "cpu" and type(target) is RalTensor and func.__name__.endswith("_"):
                # torch.nn.init.* fills a tensor in place: run it on a CPU twin (CPU's
                # generator and algorithm, so CPU's values) and copy into the device tensor.
                host = torch.empty(target.shape, dtype=target.dtype)
                rest = args[1:] if args else ()
                func(host, *rest, **{k: v for k, v in kwargs.items() if k != "tensor"})
                with torch.no_grad():
                    target.copy_(host)
                return target
            return func(*args, **kwargs)
        if kind >= _RNG_INPLACE:
            if self.rng == "cpu":
                return self._cpu_rng(kind, func, args, kwargs)
            if kind == _RNG and not any(isinstance(a, torch.Tensor) for a in args):
                kind = _FACTORY  # rand/randn/... with sizes only: create on the device
        if kind == _FACTORY:
            if kwargs.get("device") is None:
                kwargs = dict(kwargs, device=self.device)
            return func(*args, **kwargs)
        if kind == _INPLACE and args and _is_cpu_tensor(args[0]) or _is_cpu_tensor(kwargs.get("out")):
            down = lambda t: to_cpu(t) if type(t) is RalTensor else t  # noqa: E731
            return func(*_map(list(args), down), **{k: _map(v, down) for k, v in kwargs.items()})
        if not _has_cpu_tensor(args, kwargs):
            return func(*args, **kwargs)  # all operands already on a device: nothing to move
        dev = self.index
        uploaded = []

        def up(t):
            # 0-dim CPU tensors are uploaded too: many ops (meshgrid, quantile's q, masked_fill's
            # value) insist on one device, and everything in an unmodified script is on CPU.
            if type(t) is RalTensor or t.device.type != "cpu":
                return t
            twin = upload(t, dev)
            uploaded.append((t, twin, _version_of(twin)))
            return twin

        out = func(*_map(list(args), up), **{k: _map(v, up) for k, v in kwargs.items()})
        forced = _mutated_buffers(func, args, kwargs)
        for t, twin, version in uploaded:
            if any(t is f for f in forced) or _version_of(twin) != version:
                _write_back(t, twin)
        return out
