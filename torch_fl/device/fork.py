"""Fork safety: a child forked from a process using ral devices never touches the runtime.

The native runtime (device threads, OpenCL contexts, host mappings) does not survive
fork(); a DataLoader worker forked inside ral_mode used to crash on its first tensor op.
After a fork, the child (like a CUDA process's child) may run any CPU code, ral_mode becomes
a no-op there, and anything that would reach the runtime (an op on an inherited ral tensor,
a new ral allocation) raises ForkedChildError saying what to do instead. Inherited device
buffers are never freed in the child: the parent owns that memory.
"""

from __future__ import annotations

import os


class ForkedChildError(RuntimeError):
    """A forked child process tried to use a ral device."""


_MESSAGE = (
    "torch_fl: cannot use ral devices in a forked subprocess ({what}); the device runtime does "
    "not survive fork(). Use the 'spawn' start method (e.g. DataLoader(..., "
    "multiprocessing_context='spawn')) or keep worker code on CPU."
)

in_child = False
# Functions run in the child right after a fork (set by the layers above: dispatcher, mode).
_child_hooks: list = []


def on_fork_child(fn) -> None:
    """Run fn() in every child forked after this call, before the child's own code."""
    _child_hooks.append(fn)


def refuse(what: str):
    """Raise the ForkedChildError for an attempt to use the device in a forked child."""
    raise ForkedChildError(_MESSAGE.format(what=what))


def _after_fork_in_child() -> None:
    global in_child
    in_child = True
    for fn in _child_hooks:
        fn()


os.register_at_fork(after_in_child=_after_fork_in_child)
