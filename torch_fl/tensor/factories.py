"""Factory ops registered for the PrivateUse1 key, so `device="ral:N"` works without a mode."""

from __future__ import annotations

import torch

from torch_fl.core.errors import kind_refused
from torch_fl.device.compat import run_untraced
from torch_fl.device.index import device_index
from torch_fl.device.memory import allocate
from torch_fl.device.stream_state import current
from torch_fl.tensor import host_copy, transfer
from torch_fl.tensor.jit_load import in_jit_load, loadable
from torch_fl.tensor.layout import extent_elems, strides_in_format
from torch_fl.tensor.plain_ral import as_ral, is_plain_ral
from torch_fl.tensor.ral_tensor import RalTensor, outside_modes, wrap

_lib = None
_PYTHON_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Python) | torch._C.DispatchKeySet(
    torch._C.DispatchKey.PythonTLSSnapshot
)


def _under_tracer(fn, args, kwargs):
    """Run a factory kernel while a dispatch mode is active (torch.tensor(..., device="ral")
    traced by torch.compile reaches it with the Python key excluded): without the modes, so a
    fake mode never meets our real staging tensors, and a fake result if a fake mode traces."""
    modes = torch.utils._python_dispatch._get_current_dispatch_mode_stack()
    with torch.utils._python_dispatch._disable_current_modes():
        out = fn(*args, **kwargs)
        fake = next((m for m in reversed(modes) if type(m).__name__ == "FakeTensorMode"), None)
        if fake is not None and type(out) is RalTensor:
            out = fake.from_tensor(out)
    return out


def _with_python_key(fn):
    """PyTorch may call backend kernels with the Python key excluded (e.g. inside
    torch.tensor(..., device=...)); ops on RalTensors inside our kernels need it back."""

    fn = outside_modes(fn)

    def wrapper(*args, **kwargs):
        exclude = torch._C._dispatch_tls_local_exclude_set()
        if not exclude.has(torch._C.DispatchKey.Python):
            return fn(*args, **kwargs)
        include = torch._C._dispatch_tls_local_include_set()
        with torch._C._ForceDispatchKeyGuard(include, exclude - _PYTHON_KEYS):
            if torch._C._len_torch_dispatch_stack():
                return _under_tracer(fn, args, kwargs)
            return fn(*args, **kwargs)

    wrapper.__doc__ = fn.__doc__
    run_untraced(wrapper)  # entered from C++ for every factory call (one code object for all)
    return wrapper


def refuse_pinned(pin_memory, dev: int) -> None:
    """CUDA's RuntimeError for a device factory asked for pinned memory (pinning is for host
    tensors, which the factory does not make)."""
    if pin_memory:
        raise RuntimeError(f"Only dense CPU tensors can be pinned (this factory makes a ral:{dev} tensor)")


def cannot_pin(t) -> RuntimeError:
    """CUDA's RuntimeError for `t.pin_memory()` of a device tensor, naming t's type."""
    return RuntimeError(f"cannot pin '{t.type()}' only dense CPU tensors can be pinned (it is on {t.device})")


def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """aten::empty.memory_format on ral."""
    dev = device_index(device)
    refuse_pinned(pin_memory, dev)
    strides = strides_in_format(size, memory_format)
    out = transfer.empty_on(dev, size, dtype or torch.get_default_dtype(), strides)
    return loadable(out) if in_jit_load() else out


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    """aten::empty_strided on ral: the allocation spans every element the strides reach."""
    dev = device_index(device)
    refuse_pinned(pin_memory, dev)
    dtype = dtype or torch.get_default_dtype()
    nbytes = extent_elems(size, stride) * dtype.itemsize
    out = wrap(allocate(dev, nbytes, current(dev)), tuple(size), tuple(stride), 0, dtype)
    return loadable(out) if in_jit_load() else out


def efficient_zero_tensor(size, dtype=None, layout=None, device=None, pin_memory=None):
    """aten::_efficientzerotensor on ral: real zeros. Backward formulas ask for it (sgn of a
    real input); CPU and CUDA return a ZeroTensor that holds no memory, which only saves work."""
    out = empty_memory_format(size, dtype, device=device)
    return torch.ops.aten.zero_.default(out)


# Factories whose composite kernels allocate an empty result and resize it in an out= op;
# ral tensors cannot be resized in place, so these run on the host and upload once.
HOST_COMPUTED_FACTORIES = (
    "arange",
    "arange.start",
    "arange.start_step",
    "eye",
    "eye.m",
    "linspace",
    "logspace",
    "randperm",
    "range",
    "range.step",
    "tril_indices",
    "triu_indices",
)


def _host_computed(overload):
    def impl(*args, **kwargs):
        dev = device_index(kwargs.get("device"))
        refuse_pinned(kwargs.pop("pin_memory", None), dev)
        kwargs["device"] = "cpu"
        return transfer.to_device(overload(*args, **kwargs), dev)

    impl.__doc__ = f"{overload} on ral: computed on the host, uploaded once."
    return impl


def copy_from(self, dst, non_blocking=False):
    """aten::_copy_from on ral: the copy_ path PyTorch takes below the Python key."""
    if is_plain_ral(self):  # torch.from_dlpack of a ral tensor (tensor/plain_ral.py)
        self = as_ral(self)
    if is_plain_ral(dst):
        copy_from(self, as_ral(dst), non_blocking)
        return dst
    if type(dst) is not RalTensor and dst.device.type == "ral":
        return dst  # a tracer's fake ral tensor (torch.tensor(..., device=) under torch.compile)
    done = transfer.copy_into(dst, self)
    return done if done is not None else torch.ops.aten.copy_.default(dst, self)


def copy_from_and_resize(self, dst):
    """aten::_copy_from_and_resize on ral (dst must already have self's shape)."""
    if tuple(dst.shape) != tuple(self.shape):
        raise RuntimeError(f"torch_fl: cannot resize ral tensor of shape {tuple(dst.shape)} to {tuple(self.shape)}")
    return copy_from(self, dst)


def local_scalar_dense(self):
    """aten::_local_scalar_dense on ral below the Python key: `torch.tensor([t, ...])` of 0-d
    ral tensors reads each element from C++ with the Python key excluded (as it does for
    CUDA scalars, which work)."""
    return host_copy.item(as_ral(self) if is_plain_ral(self) else self)


# Dispatch keys of tensor kinds ral devices do not carry, and the kind each error names.
# Without a kernel, PyTorch answers `torch.sparse_coo_tensor(..., device="ral:0")` or
# `torch._empty_affine_quantized(..., device="ral:0")` with "Could not run ... from the
# 'Sparseral' backend" and a list of forty dispatch keys.
_REFUSED_KINDS = {
    "SparsePrivateUse1": "torch.sparse_coo",
    "SparseCsrPrivateUse1": "sparse compressed (CSR/CSC/BSR/BSC)",
    "QuantizedPrivateUse1": "quantized",
}
_refusals = None


def _refusal(kind: str):
    def refuse(op, *args, **kwargs):
        raise kind_refused(op.name(), kind)

    return refuse


def register() -> None:
    """Register the factory kernels once per process."""
    global _lib, _refusals
    if _lib is not None:
        return
    _refusals = torch.library.Library("_", "IMPL")  # noqa: TOR901 (fallbacks for ral-only keys)
    for key, kind in _REFUSED_KINDS.items():
        _refusals.fallback(_refusal(kind), dispatch_key=key)
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("empty.memory_format", _with_python_key(empty_memory_format), "PrivateUse1")
    _lib.impl("empty_strided", _with_python_key(empty_strided), "PrivateUse1")
    _lib.impl("_efficientzerotensor", _with_python_key(efficient_zero_tensor), "PrivateUse1")
    for name in HOST_COMPUTED_FACTORIES:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        _lib.impl(name, _with_python_key(_host_computed(op)), "PrivateUse1")
    _lib.impl("_copy_from", _with_python_key(copy_from), "PrivateUse1")
    _lib.impl("_copy_from_and_resize", _with_python_key(copy_from_and_resize), "PrivateUse1")
    _lib.impl("_local_scalar_dense", _with_python_key(local_scalar_dense), "PrivateUse1")
