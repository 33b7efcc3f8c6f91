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

from torch_fl.device import compat
from torch_fl.dispatch.special import special

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
            special(getattr(packet, ov))(_on_host)


# ---- functional collectives (DTensor, FSDP2's full_tensor): run eagerly, wait_tensor is a no-op ----
def _group(name):
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(name)


def _op(name: str):
    import torch.distributed as dist

    return getattr(dist.ReduceOp, name.upper())


def _f_all_reduce(func, args, kwargs):
    import torch.distributed as dist

    inp, op, group = args[0], args[1], args[2]
    out = inp if func is _F.all_reduce_.default else inp.clone()
    dist.all_reduce(out, op=_op(op), group=_group(group))
    return out


def _f_all_gather(func, args, kwargs):
    import torch.distributed as dist

    inp, size, group = args[0], args[1], args[2]
    out = kwargs.get("out")
    if out is None:
        out = inp.new_empty((inp.shape[0] * size, *inp.shape[1:]))
    dist.all_gather_into_tensor(out, inp.contiguous(), group=_group(group))
    return out


def _f_reduce_scatter(func, args, kwargs):
    import torch.distributed as dist

    inp, op, size, group = args[0], args[1], args[2], args[3]
    out = inp.new_empty((inp.shape[0] // size, *inp.shape[1:]))
    dist.reduce_scatter_tensor(out, inp.contiguous(), op=_op(op), group=_group(group))
    return out


def _f_all_to_all(func, args, kwargs):
    import torch.distributed as dist

    inp, out_splits, in_splits, group = args
    rows = sum(out_splits) if out_splits else inp.shape[0]
    out = inp.new_empty((rows, *inp.shape[1:]))
    dist.all_to_all_single(out, inp.contiguous(), list(out_splits), list(in_splits), group=_group(group))
    return out


def _f_broadcast(func, args, kwargs):
    import torch.distributed as dist

    inp, src, group = args
    out = inp if func is _F.broadcast_.default else inp.clone()
    pg = _group(group)
    dist.broadcast(out, dist.get_global_rank(pg, src), group=pg)
    return out


def _f_unsupported(func, args, kwargs):
    raise NotImplementedError(
        f"torch_fl.distributed: {func} on ral tensors is not supported yet; use the torch.distributed "
        "(non-functional) collective instead"
    )


_F = torch.ops._c10d_functional


def install_functional() -> None:
    """Run _c10d_functional ops on ral tensors eagerly through the group's collectives."""
    handlers = {
        "all_reduce": _f_all_reduce,
        "all_reduce_": _f_all_reduce,
        "all_gather_into_tensor": _f_all_gather,
        "all_gather_into_tensor_out": _f_all_gather,
        "reduce_scatter_tensor": _f_reduce_scatter,
        "all_to_all_single": _f_all_to_all,
        "broadcast": _f_broadcast,
        "broadcast_": _f_broadcast,
        "wait_tensor": lambda func, args, kwargs: args[0],
    }

    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("_c10d_functional::"):
            continue
        name = qualified.split("::", 1)[1]
        packet = getattr(_F, name, None)
        if packet is None:
            continue
        for ov in packet.overloads():
            special(getattr(packet, ov))(handlers.get(name, _f_unsupported))


def install_functional_wrapper() -> None:
    """`_wrap_tensor_autograd` (defined in Python by torch.distributed._functional_collectives)
    wraps a result in an AsyncCollectiveTensor; ours are already complete, so it is identity."""
    op = compat.functional_wrap_op()
    if op is not None:
        special(op)(lambda func, args, kwargs: args[0])
