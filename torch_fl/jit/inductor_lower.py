"""Inductor's decompositions respelled as ops a device without host-mappable memory has kernels for.

Inductor decomposes a graph for its own code generators; some of the ops it leaves behind have
no device kernel on OpenCL and would take the cpu tier (a copy to the host and a wait each) in
the extern call (`inductor_graph`). They are rewritten, per input geometry (the node metadata
holds concrete shapes), into ops that do:

- `var_mean.correction` (layer norm) -> `var.correction` and `mean.dim`; layer norm's own
  (last dim, no correction, variance only plus eps) -> `native_layer_norm`'s mean and rstd;
- `index.Tensor` with integer indices on leading dims (advanced indexing, the embedding
  forward) -> a linear index (pointwise, negative indices wrapped as Python does) and
  `index_select` on the tensor flattened over those dims;
- `_unsafe_masked_index_put_accumulate` on dim 0 of a matrix (the embedding backward) ->
  the masked values and the clamped, wrapped indices into `embedding_dense_backward`
  (deterministic, no atomics), added to the destination unless it is a fill of zeros;
- `prims.fma` (the softmax backward) -> `mul` and `add`;
- layer norm's decomposed backward -> `native_layer_norm_backward` (a second pass, below).

A node whose geometry does not fit is left as it was (the router serves it, as before).
"""

from __future__ import annotations

import operator

import torch

aten = torch.ops.aten


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _plus_eps_only(var_node: torch.fx.Node) -> bool:
    """Every use of `var_node` adds a positive constant to it (layer norm's `var + eps`)."""
    return bool(var_node.users) and all(
        u.op == "call_function"
        and u.target in (aten.add.Tensor, aten.add.Scalar)
        and len(u.args) == 2
        and u.args[0] is var_node
        and isinstance(u.args[1], float)
        and u.args[1] > 0
        and not u.kwargs
        for u in var_node.users
    )


def _layer_norm_stats(g: torch.fx.Graph, node: torch.fx.Node, x, keep: bool) -> bool:
    """Layer norm's decomposition, `var_mean(x, [-1], correction=0, keepdim=True)` whose variance
    only meets `+ eps`: the device's `native_layer_norm` (eps 0) gives the mean and 1/sqrt(var),
    and var = 1 / rstd^2 (a few ulp; a variance under float's normal range becomes 0, which
    `+ eps` absorbs). One fused launch where `var` and `mean` were two reductions (PoCL:
    0.2 ms against 2.9 + 0.6 ms for GPT-2's [4, 128, 256])."""
    xv = _val(x)
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if not (isinstance(xv, torch.Tensor) and xv.dtype == torch.float32 and xv.dim() >= 1 and keep):
        return False
    if list(dims or []) not in ([-1], [xv.dim() - 1]) or node.kwargs.get("correction") != 0:
        return False
    var_use = [u for u in node.users if u.args[1] == 0]
    if len(var_use) != 1 or not _plus_eps_only(var_use[0]):
        return False
    with g.inserting_before(node):
        ln = g.call_function(aten.native_layer_norm.default, (x, [xv.shape[-1]], None, None, 0.0))
        mean = g.call_function(operator.getitem, (ln, 1))
        rstd = g.call_function(operator.getitem, (ln, 2))
        var = g.call_function(aten.reciprocal.default, (g.call_function(aten.mul.Tensor, (rstd, rstd)),))
    for u in list(node.users):
        u.replace_all_uses_with(var if u.args[1] == 0 else mean)
        g.erase_node(u)
    g.erase_node(node)
    return True


def _var_mean(g: torch.fx.Graph, node: torch.fx.Node) -> bool:
    if not all(u.op == "call_function" and u.target is operator.getitem for u in node.users):
        return False
    x = node.args[0]
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keep = node.kwargs.get("keepdim", False)
    if _layer_norm_stats(g, node, x, keep):
        return True
    with g.inserting_before(node):
        var = g.call_function(
            aten.var.correction, (x, dims), {"correction": node.kwargs.get("correction"), "keepdim": keep}
        )
        mean = g.call_function(aten.mean.dim, (x, dims, keep))
    for u in list(node.users):
        u.replace_all_uses_with(var if u.args[1] == 0 else mean)
        g.erase_node(u)
    g.erase_node(node)
    return True


def _wrapped(g: torch.fx.Graph, idx: torch.fx.Node, dtype: torch.dtype, size: int) -> torch.fx.Node:
    """`idx` (of `dtype`) as int64 with negative entries counted from the end (an index still out of range
    stays out of range: the device kernel reports it)."""
    if dtype != torch.int64:
        idx = g.call_function(aten._to_copy.default, (idx,), {"dtype": torch.int64})
    neg = g.call_function(aten.lt.Scalar, (idx, 0))
    return g.call_function(aten.where.self, (neg, g.call_function(aten.add.Tensor, (idx, size)), idx))


def _index(g: torch.fx.Graph, node: torch.fx.Node) -> bool:
    x, idxs = node.args
    xv, ivs = _val(x), [_val(i) for i in idxs]
    if not isinstance(xv, torch.Tensor) or not idxs or len(idxs) > xv.dim() or xv.numel() == 0:
        return False
    if any(not isinstance(v, torch.Tensor) or v.dtype not in (torch.int64, torch.int32) for v in ivs):
        return False
    lead, rest = list(xv.shape[: len(idxs)]), list(xv.shape[len(idxs) :])
    bshape = list(torch.broadcast_shapes(*(v.shape for v in ivs)))
    with g.inserting_before(node):
        lin, step = None, 1
        for i in reversed(range(len(idxs))):
            term = _wrapped(g, idxs[i], ivs[i].dtype, lead[i])
            if step != 1:
                term = g.call_function(aten.mul.Tensor, (term, step))
            lin = term if lin is None else g.call_function(aten.add.Tensor, (lin, term))
            step *= lead[i]
        flat = g.call_function(aten.reshape.default, (lin, [-1]))
        rows = g.call_function(aten.reshape.default, (x, [step, *rest]))
        sel = g.call_function(aten.index_select.default, (rows, 0, flat))
        out = g.call_function(aten.reshape.default, (sel, [*bshape, *rest]))
    node.replace_all_uses_with(out)
    g.erase_node(node)
    return True


def _is_zero_fill(node) -> bool:
    return (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target in (aten.full.default, aten.zeros.default, aten.new_zeros.default)
        and (node.target is not aten.full.default or node.args[1] == 0)
    )


def _masked_put(g: torch.fx.Graph, node: torch.fx.Node) -> bool:
    x, mask, idxs, values = node.args
    xv, vv = _val(x), _val(values)
    if len(idxs) != 1 or idxs[0] is None or not isinstance(xv, torch.Tensor) or xv.dim() != 2:
        return False
    iv = _val(idxs[0])
    if not isinstance(iv, torch.Tensor) or iv.dtype not in (torch.int64, torch.int32):
        return False
    if xv.dtype != vv.dtype or not xv.dtype.is_floating_point or list(vv.shape) != [*iv.shape, xv.shape[1]]:
        return False
    n = xv.shape[0]
    with g.inserting_before(node):
        masked = g.call_function(aten.where.self, (mask, values, g.call_function(aten.zeros_like.default, (values,))))
        idx = _wrapped(g, g.call_function(aten.clamp.default, (idxs[0], -n, n - 1)), iv.dtype, n)
        grad = g.call_function(aten.embedding_dense_backward.default, (masked, idx, n, -1, False))
        out = grad if _is_zero_fill(x) else g.call_function(aten.add.Tensor, (x, grad))
    node.replace_all_uses_with(out)
    g.erase_node(node)
    return True


def _mul_with(node, x):
    """The other factor when `node` is `mul.Tensor(x, other)` or `mul.Tensor(other, x)`, else None."""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is aten.mul.Tensor):
        return None
    a, b = node.args[:2]
    return b if a is x else a if b is x else None


def _is_sum(node, x, dims, keepdim: bool) -> bool:
    """`node` is `sum.dim_IntList(x, dims, keepdim)` (dims as a list, in any spelling)."""
    if not (node.op == "call_function" and node.target is aten.sum.dim_IntList and node.args[0] is x):
        return False
    xv = _val(x)
    if not isinstance(xv, torch.Tensor):
        return False
    got = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    norm = sorted(d % xv.dim() for d in got or [])
    return norm == sorted(dims) and bool(keep) == keepdim and node.kwargs.get("dtype") is None


def _user(node, pred):
    return next((u for u in node.users if pred(u)), None)


def _layer_norm_backward(g: torch.fx.Graph, b: torch.fx.Node) -> bool:
    """Layer norm's backward as inductor's decomposition writes it, from its row sum `b`:

        gx = g * w;  b = sum(gx, -1);  c2 = sum(gx * xh, -1)
        d_input = r * (gx * N - b - xh * c2)       (r = rstd / N, xh the normalized input)
        d_weight = sum(g * xh, rows);  d_bias = sum(g, rows)   (when the graph has them)

    -> the device's `native_layer_norm_backward(g, xh, [N], 0, 1, w, ...)` (mean 0 and rstd
    1 make its normalized input xh itself, and its d_input (gx * N - b - xh * c2) / N), times
    r * N. Two launches and one fused product where there were two row sums, two column
    sums and two fused kernels (GPT-2: 9 layer norms per step)."""
    gx = b.args[0]
    gxv = _val(gx)
    if not (isinstance(gxv, torch.Tensor) and gxv.dtype == torch.float32 and gxv.dim() >= 2):
        return False
    last, n = gxv.dim() - 1, gxv.shape[-1]
    if not _is_sum(b, gx, [last], True) or gx.op != "call_function" or gx.target is not aten.mul.Tensor:
        return False
    grad, w = gx.args[:2]
    if _val(w) is None or tuple(_val(w).shape) != (n,):
        grad, w = w, grad
    wv, gv = _val(w), _val(grad)
    if not (isinstance(wv, torch.Tensor) and tuple(wv.shape) == (n,) and wv.dtype == torch.float32):
        return False
    if not (isinstance(gv, torch.Tensor) and gv.shape == gxv.shape and gv.dtype == torch.float32):
        return False
    a = _user(gx, lambda u: _mul_with(u, gx) == n)
    c1 = _user(gx, lambda u: u is not a and _mul_with(u, gx) is not None)
    if a is None or c1 is None:
        return False
    xh = _mul_with(c1, gx)
    xv = _val(xh)
    if not (isinstance(xv, torch.Tensor) and xv.shape == gxv.shape and xv.dtype == torch.float32):
        return False
    c2 = _user(c1, lambda u: _is_sum(u, c1, [last], True))
    c3 = c2 and _user(c2, lambda u: _mul_with(u, c2) is xh)
    s1 = _user(a, lambda u: u.target is aten.sub.Tensor and u.args[:2] == (a, b) and not u.kwargs)
    s2 = c3 and s1 and _user(s1, lambda u: u.target is aten.sub.Tensor and u.args[:2] == (s1, c3) and not u.kwargs)
    d_in = s2 and _user(s2, lambda u: _mul_with(u, s2) is not None)
    if not d_in:
        return False
    r = _mul_with(d_in, s2)
    rv = _val(r)
    rows = [*gxv.shape[:-1], 1]
    if not (isinstance(rv, torch.Tensor) and list(rv.shape) == rows and rv.dtype == torch.float32):
        return False
    lead = list(range(last))
    gxh = _user(grad, lambda u: _mul_with(u, grad) is xh)
    d_w = gxh and _user(gxh, lambda u: _is_sum(u, gxh, lead, False))
    d_b = _user(grad, lambda u: _is_sum(u, grad, lead, False))
    dev = gxv.device
    with g.inserting_before(d_in):
        zero = g.call_function(aten.full.default, (rows, 0.0), {"dtype": torch.float32, "device": dev})
        one = g.call_function(aten.full.default, (rows, 1.0), {"dtype": torch.float32, "device": dev})
        # every output (w stands in for the bias: only its shape matters): the router's vendor
        # tier declines a call with an absent output, and the column sums share one kernel
        ln = g.call_function(aten.native_layer_norm_backward.default, (grad, xh, [n], zero, one, w, w, [True] * 3))
        scaled = g.call_function(operator.getitem, (ln, 0))
        new_in = g.call_function(aten.mul.Tensor, (scaled, g.call_function(aten.mul.Tensor, (r, n))))
    d_in.replace_all_uses_with(new_in)
    for i, old in ((1, d_w), (2, d_b)):
        if old is not None:
            with g.inserting_before(d_in):
                out = g.call_function(operator.getitem, (ln, i))
            old.replace_all_uses_with(out)
    return True  # the old nodes are dead now: lower() removes them


def _fma(g: torch.fx.Graph, node: torch.fx.Node) -> bool:
    """`prims.fma(a, b, c)` (inductor's softmax backward) -> `a * b + c`: two roundings
    where fma has one (the same as the eager softmax backward's kernels)."""
    a, b, c = node.args
    with g.inserting_before(node):
        out = g.call_function(aten.add.Tensor, (g.call_function(aten.mul.Tensor, (a, b)), c))
    node.replace_all_uses_with(out)
    g.erase_node(node)
    return True


_RULES = {
    aten.var_mean.correction: _var_mean,
    aten.index.Tensor: _index,
    aten._unsafe_masked_index_put_accumulate.default: _masked_put,
    torch.ops.prims.fma.default: _fma,
}
# A second pass: its patterns span many nodes, and the nodes the first pass makes carry no
# metadata yet (a rewritten layer norm backward's d_input may feed the embedding backward).
_LATE_RULES = {aten.sum.dim_IntList: _layer_norm_backward}


def lower(gm: torch.fx.GraphModule) -> int:
    """Rewrite `gm` in place (its nodes carry fake-tensor metadata); the number of nodes rewritten."""
    done = 0
    for rules in (_RULES, _LATE_RULES):
        for node in list(gm.graph.nodes):
            rule = rules.get(node.target) if node.op == "call_function" else None
            if rule is not None and rule(gm.graph, node):
                done += 1
    if done:
        # what the rewritten ops used and nothing else does (fills, a replaced layer norm
        # backward's products and sums); impure ops stay
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return done
