"""GEMMs of a graph inductor compiles for a host-mappable ral device, as calls of the vendor's kernels.

Inductor lowers `mm`/`addmm`/`bmm`/`baddbmm` to its extern kernels with `out=` buffers; on ral
tensors the router has no vendor kernel for the `out=` forms, so they took the cpu tier
(PyTorch's CPU GEMM on zero-copy views, run on the dispatching thread after a drain of the
stream). The post-grad pass for "ral" (`inductor_device.rewrite_for_device`) renames them to
the functional operators below, which inductor keeps as fallback calls; at run time each calls
the aten op on the ral tensors, so the router gives it the vendor GEMM eager uses.
"""

from __future__ import annotations

import torch

# Built before these operators exist, inductor's decomposition table does not take them in
# (it takes every functional CompositeImplicitAutograd operator present when it is built).
import torch._inductor.decomposition  # noqa: F401

aten = torch.ops.aten

_lib = torch.library.Library("torch_fl", "FRAGMENT")  # noqa: TOR901 (operators torch_fl owns)
_lib.define("mm(Tensor self, Tensor mat2) -> Tensor")
_lib.define("bmm(Tensor self, Tensor mat2) -> Tensor")
_lib.define("addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor")
_lib.define("baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor")
# CompositeImplicitAutograd: below a tracer they are the aten op itself (shapes, strides).
_lib.impl("mm", lambda a, b: aten.mm.default(a, b), "CompositeImplicitAutograd")
_lib.impl("bmm", lambda a, b: aten.bmm.default(a, b), "CompositeImplicitAutograd")
_lib.impl(
    "addmm",
    lambda c, a, b, beta=1, alpha=1: aten.addmm.default(c, a, b, beta=beta, alpha=alpha),
    "CompositeImplicitAutograd",
)
_lib.impl(
    "baddbmm",
    lambda c, a, b, beta=1, alpha=1: aten.baddbmm.default(c, a, b, beta=beta, alpha=alpha),
    "CompositeImplicitAutograd",
)

VENDOR_GEMMS = {
    aten.mm.default: torch.ops.torch_fl.mm.default,
    aten.bmm.default: torch.ops.torch_fl.bmm.default,
    aten.addmm.default: torch.ops.torch_fl.addmm.default,
    aten.baddbmm.default: torch.ops.torch_fl.baddbmm.default,
}


def to_vendor_gemms(gm: torch.fx.GraphModule) -> int:
    """Rename the GEMMs on ral tensors in `gm` (in place); how many."""
    done = 0
    for node in gm.graph.nodes:
        op = VENDOR_GEMMS.get(node.target) if node.op == "call_function" else None
        val = node.meta.get("val")
        if op is None or not isinstance(val, torch.Tensor) or val.device.type != "ral":
            continue
        node.target = op
        done += 1
    if done:
        gm.recompile()
    return done
