"""Fork safety, as CUDA does it: a child forked after its parent initialised ral never touches
the runtime; a child forked before that may initialise ral itself.

The native runtime (device threads, OpenCL contexts, host mappings) does not survive fork();
a DataLoader worker forked inside ral_mode used to crash on its first tensor op. A child of an
initialised parent (`torch.ral._is_in_bad_fork()` is True there) may run any CPU code,
ral_mode becomes a no-op there, and anything that would reach the runtime (an op on an
inherited ral tensor, a new ral allocation, naming a ral device) raises ForkedChildError,
worded after CUDA's "Cannot re-initialize CUDA in forked subprocess". Inherited device buffers
are never freed in the child: the parent owns that memory. Since plugins load lazily, a
process that forks its workers before its first device use leaves them free to use ral.
"""

from __future__ import annotations

import os

from torch_fl.core import runtime
from torch_fl.core.errors import ForkedChildError

__all__ = ["ForkedChildError", "in_child", "on_fork_child", "refuse"]

in_child = False  # forked from a parent that had initialised ral (a "bad fork")
# Functions run in such a child right after the fork (set by the layers above: dispatcher, mode).
_child_hooks: list = []


def on_fork_child(fn) -> None:
    """Run fn() in every child forked after ral was initialised, before the child's own code."""
    _child_hooks.append(fn)


def refuse(what: str):
    """Raise the ForkedChildError for an attempt to use the device in a forked child."""
    raise ForkedChildError(what)


def _after_fork_in_child() -> None:
    global in_child
    if not runtime.in_bad_fork():  # runtime's own at-fork handler ran first (imported first)
        return
    in_child = True
    for fn in _child_hooks:
        fn()


os.register_at_fork(after_in_child=_after_fork_in_child)
