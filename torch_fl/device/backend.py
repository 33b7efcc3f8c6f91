"""Register `ral` as a Python PrivateUse1 backend: name, device module, hooks, guard."""

from __future__ import annotations

import atexit
import sys
import time

import torch

from torch_fl.core.runtime import device_count, on_initialized
from torch_fl.device import compat, guard
from torch_fl.device import module as device_module

_done = False


class _Hooks(compat.PRIVATEUSE1_HOOKS_BASE):
    def is_available(self) -> bool:
        return device_count() > 0

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


def _let_autograd_threads_settle() -> None:
    # A backward pass on a ral device runs on PyTorch's per-device autograd thread, which may
    # still be dropping its last reference to the finished graph task (and, with it, Python
    # objects in the captured thread-local state) just after backward() returned. If the
    # interpreter is already finalizing then, that thread is torn down and the process aborts
    # with "terminate called without an active exception". A moment's grace at exit closes
    # that window; it costs 20 ms once per process.
    time.sleep(0.02)


def register() -> None:
    """Make torch know the `ral` device type (idempotent)."""
    global _done
    if _done:
        return
    # No device_count() here: registering runs no vendor code (plugins load at first use).
    # The guard reports headroom (8 devices) until then, and the real count after.
    guard.load(0)  # must precede the Python guard: registration is first-wins
    from torch.utils import backend_registration as br

    if hasattr(br, "_setup_privateuseone_for_python_backend") and guard.register_hooks(0):
        # br._setup_privateuseone_for_python_backend without its Python hooks object: the
        # shim's C++ hooks also provide the pinned-memory allocator (DataLoader pin_memory)
        torch.utils.rename_privateuse1_backend("ral")
        torch.utils.generate_methods_for_privateuse1_backend()
        torch._register_device_module("ral", device_module)
        torch._C._acc.register_python_privateuseone_device_guard(br._DummyDeviceGuard())
    elif hasattr(br, "_setup_privateuseone_for_python_backend"):
        br._setup_privateuseone_for_python_backend(rename="ral", backend_module=device_module, hook=_Hooks())
    else:  # older torch: rename + module only
        torch.utils.rename_privateuse1_backend("ral")
        torch.utils.generate_methods_for_privateuse1_backend()
        torch._register_device_module("ral", device_module)
    # `is_ral`/`ral()` on torch storages (UntypedStorage, TypedStorage), as is_cuda/cuda()
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=False, for_module=False, for_packed_sequence=False, for_storage=True
    )
    sys.modules.setdefault("torch.ral", device_module)
    guard.load_allocator()  # torch.accelerator.memory_* (optional: see its docstring)
    atexit.register(_let_autograd_threads_settle)
    on_initialized(_tell_guard)
    _done = True


def _tell_guard() -> None:
    """Once the plugins are loaded: the device count for the C++ guard and hooks."""
    n = device_count()
    guard.load(n)
    guard.update_hooks(n)
