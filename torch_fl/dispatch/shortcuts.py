"""Shortcuts: the calls of a small model's step served with one Python entry instead of one
C++ round trip per aten op.

A RalTensor op costs a trip through PyTorch's argument parser and dispatcher and back into
Python (`__torch_dispatch__`), about 2 us before any work, once for every aten op a call
decomposes into. `F.linear` decomposes into `t` + `addmm` (two trips); `.sum()`, `.item()` and
`a + b` take one each. A small model's step (`lin(x).sum().item()`) is made of these, so:

- `linear` is registered for AutogradPrivateUse1 (it is CompositeImplicitAutograd, so this
  replaces its decomposition for ral tensors only) and calls the router for `addmm` (or `mm`)
  directly, as PyTorch's own decomposition would have, with the weight's transpose kept;
- `RalTensor.sum()`, `.item()` and the two-tensor `add/sub/mul/div` methods and operators
  (`METHODS`) call the router (or the host copy) directly, and ral_mode calls the same
  functions, `F.linear` and `torch.add/sub/mul/div` on device operands (`SHORTCUTS`).

A shortcut is taken only when nothing between the Python call and the kernel would act:
no autograd recording, forward-mode AD, autocast, torch-function or dispatch mode, tracer
(Dynamo, torch.jit.trace), profiler or op observer. Otherwise the call takes PyTorch's path unchanged;
both paths run the same aten ops through the same router, so results are identical
(tests/test_shortcuts.py).
"""

from __future__ import annotations

import math

import torch
import torch.autograd.forward_ad as _forward_ad

from torch_fl.device.compat import run_untraced
from torch_fl.dispatch import entry
from torch_fl.tensor import host_copy
from torch_fl.tensor.ral_tensor import RalTensor, adopt_bits
from torch_fl.tensor.serialization import CACHED_TRANSPOSE

aten = torch.ops.aten
_LINEAR = aten.linear.default
_T = aten.t.default
_ADDMM = aten.addmm.default
_MM = aten.mm.default
_VIEW = aten.view.default
_SUM = aten.sum.default
_TENSOR_SUM = torch.Tensor.sum
_TENSOR_ITEM = torch.Tensor.item
_F_LINEAR = torch.nn.functional.linear

_grad_on = torch.is_grad_enabled
_function_modes_on = torch._C._is_torch_function_mode_enabled
_no_function_modes = torch._C.DisableTorchFunction
_dispatch_modes = torch._C._len_torch_dispatch_stack
_any_autocast = torch._C._is_any_autocast_enabled
_compiling = torch.compiler.is_compiling
_jit_tracing = torch._C._is_tracing  # torch.jit.is_tracing() without its Python frame
# torch.profiler records ops at the dispatcher: a shortcut would hide them from it
_profiling = torch._C._autograd._profiler_enabled
_dispatch = entry.dispatch
_torch_dispatch = RalTensor.__torch_dispatch__


# Set by ral_mode (mode.py): True when every active torch-function mode is a ral_mode that
# would pass a call whose operands are all device tensors straight through. A shortcut may
# then skip the mode's round trip, as the mode itself would have called the same function.
modes_pass_device_calls = None


def _modes_quiet() -> bool:
    return not _function_modes_on() or (modes_pass_device_calls is not None and modes_pass_device_calls())


def _quiet(t) -> bool:
    """Nothing below torch-function modes would intercept a method call on t."""
    return not (
        _dispatch_modes()
        or _any_autocast()
        or _compiling()
        or _jit_tracing()
        or _forward_ad._current_level >= 0
        or entry.OBSERVERS
        or _profiling()
        or (t.requires_grad and _grad_on())
    )


_DECLINED = object()


_INT64 = range(-(2**63), 2**63)


def _operand(other) -> bool:
    """Whether other can go to the router as a binary op's second operand: a RalTensor, or a
    Python float or int64-range int (the router keys a number by its type, as PyTorch's
    wrapped numbers promote; bool and complex numbers take PyTorch's path)."""
    t = type(other)
    return t is RalTensor or t is float or (t is int and other in _INT64)


def _method(t, run, other=None):
    """run(t), or run(t, other), when nothing would intercept a call on RalTensor t (and
    other: a RalTensor or a plain number), else _DECLINED."""
    if type(t) is not RalTensor or (other is not None and not _operand(other)):
        return _DECLINED
    if not _function_modes_on():
        return _run_quiet(t, run, other)
    if not _modes_quiet():
        return _DECLINED
    # Under a mode every tensor attribute read would be a call into the mode: read them
    # (and run) with modes off, as the mode's own pass-through would.
    with _no_function_modes():
        return _run_quiet(t, run, other)


def _run_quiet(t, run, other):
    if not _quiet(t) or (type(other) is RalTensor and other.requires_grad and _grad_on()):
        return _DECLINED
    return run(t) if other is None else run(t, other)


def _aten(func, *args):
    # RalTensor's own entry (it keeps ral_mode away from the router's CPU tensors), minus
    # PyTorch's trip through the dispatcher to reach it.
    return _torch_dispatch(func, (), args)


def _sum(t):
    return _dispatch(_SUM, (t,), {})


def ral_sum(self, *args, **kwargs):
    """`Tensor.sum()` of a RalTensor: aten::sum straight to the router when nothing intervenes."""
    out = _DECLINED if args or kwargs else _method(self, _sum)
    return _TENSOR_SUM(self, *args, **kwargs) if out is _DECLINED else out


def ral_item(self):
    """`Tensor.item()` of a RalTensor: one element copied home, without the dispatcher."""
    if self._sig is None:  # not yet seen by the dispatcher: torch.load may have set a bit on it
        adopt_bits(self)
    out = _method(self, host_copy.item)
    return _TENSOR_ITEM(self) if out is _DECLINED else out


def _binary(func, op):
    """A shortcut for func(a, b) (a torch function or Tensor method of one aten overload)."""

    def run(a, b):
        return _dispatch(op, (a, b), {})

    def shortcut(a, b, *rest, **kwargs):
        out = _DECLINED if rest or kwargs else _method(a, run, b)
        return func(a, b, *rest, **kwargs) if out is _DECLINED else out

    shortcut.__name__ = shortcut.__qualname__ = func.__name__
    shortcut.__doc__ = f"`{func.__name__}` of a RalTensor and a RalTensor or number: {op} straight to the router when nothing intervenes."
    return shortcut


def _linear_direct(x, w, b) -> bool:
    # Autograd and autocast keys sit above this kernel: only recording matters here. A
    # functorch wrapper or fake tensor is not a RalTensor and takes the decomposition.
    if type(x) is not RalTensor or type(w) is not RalTensor or (b is not None and type(b) is not RalTensor):
        return False
    if _dispatch_modes() or _forward_ad._current_level >= 0 or _jit_tracing() or _profiling():
        return False
    if _grad_on() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)):
        return False
    return x.dim() >= 2 and w.dim() == 2 and (b is None or b.dim() == 1)


def _transposed(w):
    """w.t(), kept on w between calls: a weight's transpose is asked for on every forward.

    Valid while w keeps its buffer and signature; every in-place geometry change (resize_,
    set_, `.data =`) resets the signature (tensor/restride.py), so a stale view is never used.
    """
    sig = w._sig
    cached = w.__dict__.get(CACHED_TRANSPOSE)
    if cached is not None and sig is not None and cached[0] is sig and cached[1]._buf is w._buf:
        return cached[1]
    wt = _aten(_T, w)
    w.__dict__[CACHED_TRANSPOSE] = (entry.tensor_sig(w), wt)
    return wt


def _linear(x, w, b):
    # PyTorch's decomposition (ATen Linear.cpp) for the layouts it serves with one addmm (or
    # mm), None for the rest (matmul's folding rules are not repeated here).
    if x.dim() == 2:
        wt = _transposed(w)
        return _aten(_MM, x, wt) if b is None else _aten(_ADDMM, b, x, wt)
    if b is None or not x.is_contiguous():
        return None
    wt = _transposed(w)
    # ATen's _flatten_nd_linear: rows flattened (a view of contiguous input), one addmm.
    lead = list(x.shape[:-1])
    out = _aten(_ADDMM, b, _aten(_VIEW, x, [math.prod(lead), x.shape[-1]]), wt)
    return _aten(_VIEW, out, [*lead, w.shape[0]])


def linear(input, weight, bias=None):
    """`aten::linear` for ral tensors (the AutogradPrivateUse1 kernel): its `t` and `addmm`
    sent to the router directly when no autograd graph is recorded, else decomposed."""
    if _linear_direct(input, weight, bias):
        out = _linear(input, weight, bias)
        if out is not None:
            return out
    return _LINEAR.decompose(input, weight, bias)


def functional_linear(input, weight, bias=None):
    """`F.linear` as ral_mode calls it on device operands: the kernel's shortcut without the
    trip through the dispatcher, when autocast and other modes leave the call alone."""
    if _linear_direct(input, weight, bias) and not _any_autocast() and _modes_quiet():
        out = _linear(input, weight, bias)
        if out is not None:
            return out
    return _F_LINEAR(input, weight, bias)


_T_ = torch.Tensor
# Tensor methods (and operators) of a tensor and a tensor or number that are one aten
# overload each. `__radd__` and `__rmul__` call the same overload with self first, as
# PyTorch's own do (`0.5 * x` is `mul(x, 0.5)`: GELU's constants); in-place variants and
# `__rsub__`/`__rtruediv__` (other ops) are left to PyTorch.
_BINARY_METHODS = {
    "add": aten.add.Tensor,
    "sub": aten.sub.Tensor,
    "mul": aten.mul.Tensor,
    "div": aten.div.Tensor,
    "__add__": aten.add.Tensor,
    "__sub__": aten.sub.Tensor,
    "__mul__": aten.mul.Tensor,
    "__truediv__": aten.div.Tensor,
    "__radd__": aten.add.Tensor,
    "__rmul__": aten.mul.Tensor,
}
_BINARY_FUNCTIONS = {
    torch.add: aten.add.Tensor,
    torch.sub: aten.sub.Tensor,
    torch.mul: aten.mul.Tensor,
    torch.div: aten.div.Tensor,
}
METHODS = {"sum": ral_sum, "item": ral_item}
METHODS.update({name: _binary(getattr(_T_, name), op) for name, op in _BINARY_METHODS.items()})
# The functions ral_mode serves with a shortcut when their operands are on a device. Each
# computes the same values as the function it stands for and mutates none of its operands.
SHORTCUTS = {getattr(_T_, name): fn for name, fn in METHODS.items()}
SHORTCUTS.update({func: _binary(func, op) for func, op in _BINARY_FUNCTIONS.items()})
SHORTCUTS[_F_LINEAR] = functional_linear
_lib = None


def register() -> None:
    """Install the shortcuts once per process: the linear kernel and the RalTensor methods."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    _lib.impl("linear", linear, "AutogradPrivateUse1")
    for name, fn in METHODS.items():
        setattr(RalTensor, name, fn)
    run_untraced(linear, *METHODS.values())
