"""c10d ops that reach a ral tensor through a backend other than ralccl (e.g. plain "gloo").

Such a call arrives at RalTensor's dispatch as `torch.ops.c10d.<op>`. Routing it like a compute
op ran it on a CPU copy and dropped the result on devices that are not host-mappable (the
collective "worked" but exchanged nothing). Here it runs on host staging instead: zero-copy where
the device is host-mappable, otherwise copied down, run, waited for, and copied back. It blocks
until the collective is done, so the returned Work is already complete; ralccl is the
asynchronous path.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves, tree_map

from . import _device_io as io

_Work = torch._C._distributed_c10d.Work


def _on_host(func, args, kwargs):
    back: dict[int, torch.Tensor] = {}
    staged = []
    for d in {x._dev for x in tree_leaves((args, kwargs)) if io.is_ral(x)}:
        io.ReadyEvent(d).wait()

    def down(x):
        if not io.is_ral(x):
            return x
        host, s = io.stage(x, read=True)
        staged.append(s)
        back[id(host)] = x
        return host

    out = func(*tree_map(down, args), **tree_map(down, kwargs))
    for w in tree_leaves(out):
        if isinstance(w, torch.ScriptObject):  # a boxed c10d Work
            w = _Work.unbox(w)
        if isinstance(w, _Work):
            w.wait()
    for s in staged:
        s.write_back()
    return tree_map(lambda x: back.get(id(x), x) if isinstance(x, torch.Tensor) else x, out)


def install() -> None:
    """Route every c10d op overload on ral tensors through host staging."""
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("c10d::"):
            continue
        packet = getattr(torch.ops.c10d, qualified.split("::", 1)[1], None)
        if packet is None:
            continue
        for ov in packet.overloads():
            io.SPECIAL[getattr(packet, ov)] = _on_host
