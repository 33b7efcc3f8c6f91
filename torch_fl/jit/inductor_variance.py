"""Small variances in inductor's C++ kernels on host-mappable ral devices: two steps, as on CPU.

Inductor lowers `var_mean` (layer norm's statistics) as a Welford reduction, except where
`torch._inductor.lowering.use_two_step_variance` picks the two-step form (mean, then the sum
of squared deviations): on device type "cpu" for reductions of at most
`config.cpp.use_two_step_variance_threshold` (1024) elements, because Welford does more work
per element. On any other device type the threshold is `unroll_reductions_threshold` (8), so
a graph on "ral" got Welford for layer norm's 256-element rows: 0.20 ms for GPT-2's residual
add + layer norm ([4, 128, 256]) on ral:0 against 0.16 ms for the same compile on CPU.

`two_step(gm)` (the post-grad pass, host-mappable graphs only) writes such `var_mean` nodes
as the ops inductor's two-step lowering builds (`mean`, `sub`, `mul`, `sum`, `div`), so the C++
kernels are what a CPU compile of the graph generates. Float32/float64 inputs with static
sizes only (half inputs keep Welford, which upcasts them).
"""

from __future__ import annotations

import operator

import torch

aten = torch.ops.aten


def _threshold() -> int:
    import torch._inductor.config as iconfig

    return int(iconfig.cpp.use_two_step_variance_threshold)


def _rewrite(g: torch.fx.Graph, node: torch.fx.Node) -> bool:
    x = node.args[0]
    xv = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(xv, torch.Tensor) or xv.dtype not in (torch.float32, torch.float64) or xv.dim() == 0:
        return False
    if not all(u.op == "call_function" and u.target is operator.getitem for u in node.users):
        return False
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if not dims:
        return False  # None or []: a full reduction, which inductor keeps as Welford too
    dims = [d % xv.dim() for d in dims]
    sizes = [xv.shape[d] for d in dims]
    if not all(isinstance(s, int) for s in xv.shape):
        return False  # dynamic sizes: leave inductor's choice
    n = 1
    for s in sizes:
        n *= s
    outer = xv.numel() // max(n, 1)
    if n == 0 or n > _threshold() or outer == 1:  # inductor's own conditions for two steps
        return False
    correction = node.kwargs.get("correction")
    correction = 1 if correction is None else correction
    keep = node.kwargs.get("keepdim", False)
    denom = float(max(n - correction, 0)) if correction else float(n)

    def call(op, args, kwargs=None):
        new = g.call_function(op, args, kwargs or {})
        new.meta["val"] = op(*[a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args], **(kwargs or {}))
        return new

    with g.inserting_before(node):
        mean_k = call(aten.mean.dim, (x, dims, True))
        diff = call(aten.sub.Tensor, (x, mean_k))
        total = call(aten.sum.dim_IntList, (call(aten.mul.Tensor, (diff, diff)), dims, keep))
        var = call(aten.div.Tensor, (total, denom))
        mean = mean_k if keep else call(aten.squeeze.dims, (mean_k, dims))
    for u in list(node.users):
        u.replace_all_uses_with(var if u.args[1] == 0 else mean)
        g.erase_node(u)
    g.erase_node(node)
    return True


def two_step(gm: torch.fx.GraphModule) -> int:
    """Rewrite `gm`'s small float `var_mean` nodes as inductor's two-step form (in place); how many."""
    done = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is aten.var_mean.correction:
            done += _rewrite(gm.graph, node)
    if done:
        gm.recompile()
    return done


def enabled() -> bool:
    """Whether the post-grad pass rewrites small variances (`TORCH_FL_INDUCTOR_FAST_MATH`, which
    also switches `inductor_math`'s tanh: both make ral:0's kernels what they are on CPU or faster)."""
    from torch_fl.jit.inductor_math import enabled as fast

    return fast()
