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
