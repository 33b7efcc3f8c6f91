"""Every torch-version-dependent detail of torch_fl, in one place, one comment per workaround.

Verified range: torch 2.10 to 2.14 (docs/torch_versions.md; scripts/torch_versions.sh reruns it).
Code elsewhere uses these names and never tests torch.__version__ itself.
"""

from __future__ import annotations

import sys

import torch

# torch._C._acc.PrivateUse1Hooks (the Python-subclassable hooks for a PrivateUse1 backend) is
# present in every verified release; kept as a probe so an unsupported torch fails later, at a
# hook call, with a torch error rather than at import with an AttributeError.
PRIVATEUSE1_HOOKS_BASE = torch._C._acc.PrivateUse1Hooks if hasattr(torch._C, "_acc") else object


def _torch_minor() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


# The C++ standard the device-guard shim is compiled with: torch 2.14's c10 headers use
# operator<=> and std::strong_ordering (C++20); older ones build as C++17, which was their floor.
GUARD_CXX_STD = "c++20" if _torch_minor() >= (2, 14) else "c++17"


def allow_safe_globals(functions: list) -> None:
    """Allow functions under torch.load(weights_only=True) where this torch has the allow-list."""
    # add_safe_globals exists in every verified release; older ones simply load without it.
    if hasattr(torch.serialization, "add_safe_globals"):
        torch.serialization.add_safe_globals(functions)


def torch_initializing() -> bool:
    """True while torch/__init__.py is still executing (an autoloaded backend runs then)."""
    # importlib marks a module's spec `_initializing` while its body runs (CPython 3.4+); torch
    # has no public flag for "autoload in progress".
    spec = getattr(sys.modules.get("torch"), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def engine_run_backward(tensors: tuple, grads: tuple, inputs: tuple) -> None:
    """One backward straight on the autograd engine, without torch.autograd's Python wrapper."""
    # The wrapper imports sympy on first use (~1 s); the engine method's positional signature
    # (tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable,
    # accumulate_grad) is the same in every verified release.
    torch.autograd.Variable._execution_engine.run_backward(tensors, grads, False, False, inputs, True, False)


def disable_autograd_multithreading() -> None:
    """Run backward passes of this thread on the calling thread (no per-device worker queues)."""
    # torch._C._set_multithreading_enabled is what torch.autograd.set_multithreading_enabled
    # calls; the public one is a context manager class, used here without a `with`.
    torch._C._set_multithreading_enabled(False)


def functional_wrap_op():
    """`_c10d_functional::_wrap_tensor_autograd.default`, or None where this torch lacks it."""
    # torch.distributed._functional_collectives registers this op from 2.11; torch 2.10 has no
    # such op (scripts/torch_versions.sh found the AttributeError), so there is nothing to route.
    packet = getattr(torch.ops._c10d_functional, "_wrap_tensor_autograd", None)
    return None if packet is None else packet.default


# Dynamo's frame evaluator: a code object can be marked "skip, recursively" (private C API, the
# mechanism under torch._dynamo.disable). Without it torch_fl's frames may be traced.
_eval_frame = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
_set_strategy = getattr(_eval_frame, "set_code_exec_strategy", None)


def run_untraced(*fns) -> bool:
    """Have Dynamo run these functions, and everything they call, without tracing them.

    For the Python kernels C++ enters (RalTensor.__torch_dispatch__, the factory, SDPA,
    linear and autocast kernels) and the RalTensor shortcut methods.

    Dynamo compiles every Python frame a compiled function reaches, the eager stretches
    between graph breaks included (an RNN's cell loop, BatchNorm's cumulative average). There
    it compiled torch_fl's dispatch (entered from C++ for every op) and the vendor plans it
    generates, and failed to guard on their cffi library object (no weak references): GRU,
    LSTM, CTCLoss, GaussianNLLLoss under torch.compile raised InternalTorchDynamoError. They
    are device plumbing below the dispatcher, like torch's own kernels. This marks each code
    object "skip, recursively" in Dynamo's frame evaluator (what torch._dynamo.disable does,
    without importing Dynamo or a wrapper frame per call). False where torch lacks the hook."""
    if _set_strategy is None:
        return False
    action = _eval_frame._FrameAction
    strategy = _eval_frame._FrameExecStrategy(action.SKIP, action.SKIP)
    for fn in fns:
        _set_strategy(getattr(fn, "__func__", fn).__code__, strategy)
    return True
