"""A constant causal attention mask rewritten as `is_causal=True`, on the joint graph.

Transformers' GPT-2 builds its attention mask from shapes (arange, cumsum, comparisons), so
a compiled graph holds it as a value that depends on no graph input. Passed as a mask, it
costs every step: the device's fused attention reads an [L, S] mask (ral:1: 7.0 against
4.9 ms per GPT-2 step with `is_causal`), the backward adds it again, and the joint graph's
partition saves it for the backward. Eager GPT-2 passes no mask and `is_causal=True` (its
mask helper drops a purely causal mask when it is not being traced); this gives the compiled
step the same call.

`rewrite(graph)` evaluates, once, the mask argument of each attention call on ral tensors
whose mask depends on no graph input, and where its values are exactly PyTorch's causal
pattern, `tril(ones(L, S))` with L == S (boolean True = attend, or additive 0 / -inf or 0 /
finfo.min), broadcast over batch and heads, the call becomes `attn_mask=None,
is_causal=True` (forward and backward alike; they read the same mask node). Anything else
is left as it was: padding masks, any other pattern, L != S (PyTorch's `is_causal` aligns
top-left, HF's masks with a cache bottom-right), dropout, a mask that wants a gradient.
Runs before the joint graph is partitioned: `backend="ral"` calls it in its partition
function, inductor as its `joint_custom_pre_pass` (`inductor_joint`, keyed by
`inductor_key`). `TORCH_FL_CAUSAL_MASK=0` turns it off.
"""

from __future__ import annotations

import os

import torch

_aten = torch.ops.aten
_MAX_BYTES = 64 << 20  # masks larger than this are not evaluated at compile time
STATS = {"rewritten": 0}  # attention calls rewritten in this process
OBSERVERS: list = []  # callables given each graph after the pass (tests count its attention calls)


def enabled() -> bool:
    """Whether compiles rewrite constant causal masks (`TORCH_FL_CAUSAL_MASK`, default on)."""
    return os.environ.get("TORCH_FL_CAUSAL_MASK", "1") != "0"


# attention op -> the name of its mask argument
_CALLS = {
    _aten._scaled_dot_product_fused_attention_overrideable.default: "attn_bias",
    _aten._scaled_dot_product_fused_attention_overrideable_backward.default: "attn_bias",
    _aten.scaled_dot_product_attention.default: "attn_mask",
}


def _position(node, name: str) -> int:
    return [a.name for a in node.target._schema.arguments].index(name)


def _arg(node, name: str):
    """The value of argument `name` of a call node (positional, keyword or its default)."""
    i = _position(node, name)
    if i < len(node.args):
        return node.args[i]
    if name in node.kwargs:
        return node.kwargs[name]
    return node.target._schema.arguments[i].default_value


def _set(node, name: str, value) -> None:
    i = _position(node, name)
    if i < len(node.args):
        args = list(node.args)
        args[i] = value
        node.args = tuple(args)
    else:
        node.kwargs = {**node.kwargs, name: value}


def _pure(node) -> bool:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    return not (node.target._schema.is_mutable or torch.Tag.nondeterministic_seeded in node.target.tags)


def _constant(node, values: dict):
    """The value of `node` when it depends on no graph input (None otherwise), evaluated on
    real tensors once; `values` memoises across calls of one graph."""
    if node in values:
        return values[node]
    stack, seen = [node], set()
    while stack:  # the node and its ancestors
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    for n in node.graph.nodes:  # graph order: inputs before their users
        if n not in seen or n in values:
            continue
        if n.op == "get_attr":
            v = getattr(n.graph.owning_module, n.target, None)
            values[n] = v if isinstance(v, torch.Tensor) else None
            continue
        if not _pure(n) or any(values.get(a) is None for a in n.all_input_nodes):
            values[n] = None
            continue
        args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: values[a])
        with unset_fake_temporarily(), torch.no_grad():
            out = n.target(*args, **kwargs)
        ok = isinstance(out, torch.Tensor) and out.numel() * out.element_size() <= _MAX_BYTES
        values[n] = out if ok else None
    return values[node]


def is_causal_mask(mask: torch.Tensor, L: int, S: int) -> bool:
    """Whether `mask`, broadcast to [..., L, S], is exactly PyTorch's causal pattern with L == S:
    boolean `tril(ones(L, S))`, or additive 0 on and below the diagonal and -inf or the
    dtype's lowest finite value above it."""
    if L != S or mask.dim() < 2 or tuple(mask.shape[-2:]) != (L, S):
        return False  # a broadcast row or column of the mask cannot be causal for L > 1
    m = mask.detach().cpu().reshape(-1, L, S)
    keep = torch.ones(L, S, dtype=torch.bool).tril()
    if m.dtype == torch.bool:
        return bool((m == keep).all())
    if not m.is_floating_point():
        return False
    low = torch.finfo(m.dtype).min
    zero_below = bool((m[:, keep] == 0).all())
    hidden = m[:, ~keep]
    if hidden.numel() == 0:
        return zero_below
    if not zero_below:
        return False
    neg_inf = bool(torch.isneginf(hidden).all())
    lowest = bool((hidden == low).all())
    return neg_inf or lowest


def _ral(node) -> bool:
    q = _arg(node, "query")
    v = q.meta.get("val") if isinstance(q, torch.fx.Node) else None
    return isinstance(v, torch.Tensor) and v.device.type == "ral"


def _qk_lengths(node) -> tuple[int, int] | None:
    q, k = (_arg(node, "query"), _arg(node, "key"))
    qv, kv = (x.meta.get("val") if isinstance(x, torch.fx.Node) else None for x in (q, k))
    if not isinstance(qv, torch.Tensor) or not isinstance(kv, torch.Tensor) or qv.dim() < 2:
        return None
    L, S = qv.shape[-2], kv.shape[-2]
    if not isinstance(L, int) or not isinstance(S, int):
        return None  # dynamic sizes: the mask is not a constant of the graph anyway
    return L, S


def _eligible(node) -> bool:
    if _arg(node, "dropout_p") != 0.0 or _arg(node, "is_causal"):
        return False
    if node.target is _aten._scaled_dot_product_fused_attention_overrideable_backward.default:
        return not _arg(node, "grad_input_mask")[3]  # the mask's gradient is wanted
    if node.target is _aten._scaled_dot_product_fused_attention_overrideable.default:
        return not _arg(node, "return_debug_mask")
    return True


def _drop_dead(graph: torch.fx.Graph, roots) -> None:
    """Erase the unused pure nodes left by the rewrite (the mask's computation)."""
    stack, erased = list(roots), set()
    while stack:
        n = stack.pop()
        if n in erased or n.users or not (_pure(n) or n.op == "get_attr"):
            continue
        inputs = n.all_input_nodes
        graph.erase_node(n)
        erased.add(n)
        stack.extend(inputs)


def rewrite(graph: torch.fx.Graph) -> int:
    """Rewrite attention calls on ral tensors whose mask is a constant causal pattern to
    `attn_mask=None, is_causal=True`; returns how many calls changed."""
    if isinstance(graph, torch.fx.GraphModule):
        graph = graph.graph
    done = _rewrite(graph) if enabled() else 0
    for observe in OBSERVERS:
        observe(graph)
    return done


def attention_calls(graph: torch.fx.Graph) -> list[tuple[str, bool, bool]]:
    """(op name, is_causal, has a mask) of each attention call on ral tensors in `graph`."""
    out = []
    for node in graph.nodes:
        if node.op == "call_function" and node.target in _CALLS and _ral(node):
            mask = _arg(node, _CALLS[node.target])
            out.append((node.target.name(), bool(_arg(node, "is_causal")), mask is not None))
    return out


def _rewrite(graph: torch.fx.Graph) -> int:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    values, done, masks = {}, 0, []
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _CALLS or not _ral(node):
            continue
        name = _CALLS[node.target]
        mask = _arg(node, name)
        lengths = _qk_lengths(node)
        if not isinstance(mask, torch.fx.Node) or lengths is None or not _eligible(node):
            continue
        value = _constant(mask, values)
        if value is None:
            continue
        with unset_fake_temporarily():  # compile passes run under the graph's fake mode
            causal = is_causal_mask(value, *lengths)
        if not causal:
            continue
        _set(node, name, None)
        _set(node, "is_causal", True)
        masks.append(mask)
        done += 1
    if done:
        _drop_dead(graph, masks)
        graph.lint()
        if graph.owning_module is not None:
            graph.owning_module.recompile()
        STATS["rewritten"] += done
    return done
