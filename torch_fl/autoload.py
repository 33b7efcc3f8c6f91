"""Load torch_fl at `import torch`, and make a late `import torch_fl` safe for autograd.

PyTorch imports every entry point of the "torch.backends" group near the end of
`import torch` (torch/__init__.py, `_import_device_backends`) unless
TORCH_DEVICE_BACKEND_AUTOLOAD=0. Our entry point is `load` below; importing this module
already imports the package, which registers the `ral` device.

Why the late-import check exists: the autograd engine sizes its per-device ready queues once,
at the first backward pass, from the device guards registered at that moment. If torch_fl is
imported after a CPU backward (autoload off), the engine has no queue for ral devices and a ral
backward dies with the engine's INTERNAL ASSERT on `device_ready_queues_`. That cannot be
undone, but a backward with autograd multithreading disabled runs every node on the calling
thread's CPU queue and never looks up a device queue, so we switch that on for the importing
thread and say so. The check needs a ral device, so it waits for the first device use (plugins
load lazily): importing torch_fl runs no vendor code.

Why `load` never raises: PyTorch turns an exception from a backend entry point into a failed
`import torch`, and autoload runs in every Python program on the machine. A torch_fl that cannot
load (a native build that does not match the package, no compiler for the device guard, a torch
it does not support) must cost CPU-only programs nothing: `load` warns and leaves the `ral`
device unavailable, and the first use of torch_fl's API raises the real error.
TORCH_FL_AUTOLOAD_STRICT=1 lets the failure break `import torch` instead (for CI). For the same
reason this module, the entry point itself, imports nothing heavy at module level.
"""

from __future__ import annotations

import os
import sys
import warnings
from importlib import import_module

from torch_fl import submodule_initializing

ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"
STRICT_ENV = "TORCH_FL_AUTOLOAD_STRICT"
_QUEUE_ASSERT = "device_ready_queues_"
LATE_IMPORT_HELP = (
    "torch_fl was imported after autograd had already run a backward pass, so the autograd engine "
    "has no worker queue for ral devices. To avoid this, import torch_fl before the first backward, "
    f"or leave autoload on (unset {ENV}=0) so that `import torch` loads it."
)


def load() -> None:
    """Entry point of the "torch.backends" group; runs inside `import torch`."""
    if submodule_initializing():
        # `import torch_fl.mode` (say) as the first import: its `import torch` lands here while
        # torch_fl.mode is half-built, and torch_fl.api needs it whole. The api then loads on
        # first use of a public name (torch_fl.__getattr__) instead of failing `import torch`.
        return
    try:
        api = import_module("torch_fl.api")  # registers the ral device
    except Exception as exc:  # noqa: BLE001 - whatever failed, `import torch` must not
        if os.getenv(STRICT_ENV) == "1":
            raise
        warnings.warn(
            f"torch_fl could not load, so the 'ral' device is unavailable in this process ({type(exc).__name__}: "
            f"{exc}). CPU work is unaffected. `ralctl doctor` diagnoses the installation; "
            f"{ENV}=0 stops PyTorch from loading torch_fl.",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    # The package skipped `from torch_fl.api import *` while torch was importing (so that a
    # failure lands here); publish the names now.
    package = sys.modules["torch_fl"]
    for name in api.__all__:
        setattr(package, name, getattr(api, name))


def _probe_backward(index: int) -> RuntimeError | None:
    """Run an empty backward on ral:index straight on the engine; the engine's error, or None."""
    import torch

    from torch_fl.device import compat

    x = torch.empty(0, device=f"ral:{index}", requires_grad=True)
    grad = torch.empty(0, device=f"ral:{index}")
    try:
        compat.engine_run_backward((x,), (grad,), (x,))  # cheap: this probe runs at import time
    except RuntimeError as exc:
        return exc
    return None


def after_import() -> None:
    """Called at the end of `import torch_fl`: detect an autograd engine started without ral."""
    from torch_fl.core.runtime import on_initialized
    from torch_fl.device import compat

    if compat.torch_initializing():
        return  # autoloaded by `import torch`: no backward can have run yet
    # At the first device use, once initialisation is complete (the probe runs a backward, whose
    # engine threads may need the runtime too).
    on_initialized(_check_engine, late=True)


def _check_engine() -> None:
    from torch_fl.core.runtime import device_count
    from torch_fl.device import compat

    n = device_count()
    if n == 0:
        return
    # The engine sizes its queues to the largest device count of any type, so the highest ral
    # index is the one that fails first (a CUDA machine may cover ral:0 but not ral:1).
    err = _probe_backward(n - 1)
    if err is None:
        return
    if _QUEUE_ASSERT not in str(err):
        return  # some other device problem: it surfaces with its own message on real use
    compat.disable_autograd_multithreading()
    if _probe_backward(n - 1) is not None:
        raise RuntimeError(LATE_IMPORT_HELP)
    warnings.warn(
        LATE_IMPORT_HELP + " Backward passes in this thread now run on the calling thread (autograd "
        "multithreading disabled); a backward on a ral device from another thread needs "
        "`with torch.autograd.set_multithreading_enabled(False):`.",
        RuntimeWarning,
        stacklevel=3,
    )


def autoload_enabled() -> bool:
    """Whether `import torch` loads backends from entry points (PyTorch's own rule)."""
    return os.getenv(ENV, "1") == "1"
