"""The default `torch.compile` backend (inductor) on ral devices that are not host-mappable.

Inductor generates host C++ (or Triton) kernels; neither can touch an OpenCL buffer. For a
graph that holds a tensor of such a device, inductor's post-grad pass for "ral" (registered by
`inductor_device`) replaces the graph's computation with one call of the opaque operator
`torch_fl::ral_graph`, which inductor keeps as an extern (fallback) call: inductor still does
Dynamo's capture, AOT autograd, its decompositions and its min-cut partition of the joint
graph, and the computation runs as the `ral` backend runs a graph (`compile_backend.partition`:
pointwise chains as fused jit kernels, everything else through the router, vendor kernels first).

The operator carries its graph as text (its nodes, pickled and compressed: `encode`), so inductor's FX
graph cache can store and reload the generated wrapper in another process. The graph is
partitioned per input geometry on first use (node metadata is recomputed with fake tensors of
that geometry), up to `MAX_GEOMETRIES`; beyond that the graph runs op by op through the router.
"""

from __future__ import annotations

import base64
import operator
import pickle
import zlib

import torch

from torch_fl.core.errors import UnsupportedError
from torch_fl.tensor.ral_tensor import RalTensor

MAX_GEOMETRIES = 16

# Inductor's decomposition table takes in every functional CompositeImplicitAutograd operator
# that exists when it is built (export's default decompositions): built before ours exists, it
# leaves ral_graph to run as the one extern call it is meant to be.
import torch._inductor.decomposition  # noqa: E402,F401

_lib = torch.library.Library("torch_fl", "FRAGMENT")  # noqa: TOR901 (an operator torch_fl owns)
_lib.define("ral_graph(Tensor[] tensors, SymInt[] ints, str graph) -> Tensor[]")
# Writes into graph inputs stay visible to inductor as mutations: AOT ends a graph that
# mutates an input with `copy_(input, new_value)`, which becomes this op after the graph call
# (inductor's fallback kernels may mutate inputs, but not also return a list).
_lib.define("ral_copy_(Tensor(a!) dst, Tensor src) -> ()")


class _Runner:
    """One serialized graph: deserialized once, partitioned once per input geometry."""

    def __init__(self, blob: str):
        self.gm, self.input_bits = decode(blob)
        self.parts: dict = {}

    def __call__(self, args: list):
        if not all(type(a) in (RalTensor, torch.Tensor, torch.nn.Parameter, int, float, bool) for a in args):
            # a tracer (fake tensors, proxies), or a conjugate view among the inputs: the graph itself
            return self.gm(*_with_input_bits(args, self.input_bits))
        key = tuple(
            (a.shape, a.stride(), a.storage_offset(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
            for a in args
        )
        part = self.parts.get(key)
        if part is None:
            if len(self.parts) >= MAX_GEOMETRIES:
                return self.gm(*args)
            try:
                part = _partitioned(self.gm, args)
            except Exception as exc:  # a partitioning bug must not cost the user the graph
                import warnings

                warnings.warn(
                    f"torch_fl: the compiled graph runs op by op ({type(exc).__name__}: {exc})",
                    RuntimeWarning,
                    stacklevel=2,
                )
                part = self.gm
            self.parts[key] = part
        return part(*args)


def _partitioned(gm: torch.fx.GraphModule, args: list) -> torch.fx.GraphModule:
    """A copy of `gm` with node metadata for these inputs, inductor's decompositions that would
    take the cpu tier respelled (`inductor_lower`), cut into fused regions."""
    import copy

    from torch_fl.jit.compile_backend import partition
    from torch_fl.jit.inductor_lower import lower

    g = copy.deepcopy(gm)
    _propagate(g, args)
    if lower(g):
        _propagate(g, args)
    return partition(g)


def _propagate(g: torch.fx.GraphModule, args: list) -> None:
    """Fake-tensor metadata (`meta["val"]`) on every node of `g` for these inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    # Constants (get_attr) are real ral tensors; converted by the fake mode itself they lose
    # their device index, so they get fakes of their own while metadata is computed.
    consts = {n.target: getattr(g, n.target) for n in g.graph.nodes if n.op == "get_attr" and "." not in n.target}
    consts = {k: v for k, v in consts.items() if isinstance(v, torch.Tensor)}
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fakes = [_fake(a) if isinstance(a, torch.Tensor) else a for a in args]
        fake_consts = {k: _fake(v) for k, v in consts.items()}
    for k, v in fake_consts.items():
        setattr(g, k, v)
    try:
        FakeTensorProp(g, mode).propagate_dont_convert_inputs(*fakes)
    finally:
        for k, v in consts.items():
            setattr(g, k, v)


def _fake(t: torch.Tensor) -> torch.Tensor:
    """A fake tensor with `t`'s geometry, dtype and device (inside a FakeTensorMode)."""
    extent = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1
    base = torch.empty(max(extent, 0) if t.numel() else t.storage_offset(), dtype=t.dtype, device=t.device)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


class _Ref:
    """A node's position in an encoded graph (pickled in place of the node)."""

    def __init__(self, i: int):
        self.i = i


def _with_input_bits(args: list, input_bits: dict) -> list:
    """args with the lazy conjugate/negative bits the graph was traced with. Inductor computes
    an extern call's output metadata on fakes of its IR buffers, which carry no such bits;
    the graph of a conjugate-view input (`_conj` then `view_as_real`) would raise on them."""
    if not input_bits:
        return args
    from torch._subclasses.fake_tensor import FakeTensor

    out = list(args)
    for i, (conj, neg) in input_bits.items():
        a = out[i]
        if isinstance(a, torch.Tensor) and (a.is_conj(), a.is_neg()) != (conj, neg):
            if not isinstance(a, FakeTensor):  # a real input is the traced tensor itself
                raise RuntimeError(
                    f"torch_fl: compiled graph input {i} has conjugate/negative bits {(a.is_conj(), a.is_neg())}, "
                    f"traced with {(conj, neg)}"
                )
            a = a.view_as(a)  # an alias; the bits are set on it, not on the caller's tensor
            torch._C._set_conj(a, conj)
            torch._C._set_neg(a, neg)
            out[i] = a
    return out


def encode(gm: torch.fx.GraphModule) -> str:
    """The graph's nodes and constants as text. Not GraphModule's own pickling: that re-traces
    the generated code on load, which runs the ops without tensor inputs (arange, full) right
    there, in whatever fake mode the loader happens to be in, and keeps their results. The
    conjugate/negative bits of its tensor inputs, as traced, come along."""
    index, nodes = {}, []
    for i, n in enumerate(gm.graph.nodes):
        index[n] = i
        t = n.target
        if isinstance(t, torch._ops.OpOverload):
            t = ("op", t._schema.name, t._overloadname)
        args = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: _Ref(index[a]))
        nodes.append((n.op, n.name, t, args))
    attrs = {n.target: getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    placeholders = [_val(n) for n in gm.graph.nodes if n.op == "placeholder"]
    bits = {
        i: (v.is_conj(), v.is_neg())
        for i, v in enumerate(placeholders)
        if isinstance(v, torch.Tensor) and (v.is_conj() or v.is_neg())
    }
    return base64.b64encode(zlib.compress(pickle.dumps((nodes, attrs, bits)))).decode()


def decode(blob: str) -> tuple[torch.fx.GraphModule, dict]:
    """The GraphModule `encode` wrote and its inputs' bits {position: (conj, neg)}."""
    nodes, attrs, bits = pickle.loads(zlib.decompress(base64.b64decode(blob)))
    g, env = torch.fx.Graph(), []
    for op, name, t, args in nodes:
        args, kwargs = torch.fx.node.map_aggregate(args, lambda a: env[a.i] if isinstance(a, _Ref) else a)
        if isinstance(t, tuple) and t[0] == "op":
            ns, _, op_name = t[1].partition("::")
            t = getattr(getattr(getattr(torch.ops, ns), op_name), t[2] or "default")
        if op == "placeholder":
            env.append(g.placeholder(name))
        elif op == "get_attr":
            env.append(g.get_attr(t))
        elif op == "output":
            env.append(g.output(args[0]))
        else:
            env.append(g.create_node(op, t, args, kwargs, name))
    root = torch.nn.Module()
    for k, v in attrs.items():
        setattr(root, k, v)
    return torch.fx.GraphModule(root, g), bits


_RUNNERS: dict[str, _Runner] = {}


def _ral_graph(tensors, ints, graph):
    """The operator's one kernel (CompositeImplicitAutograd: it runs below any tracer as ops)."""
    runner = _RUNNERS.get(graph)
    if runner is None:
        runner = _RUNNERS[graph] = _Runner(graph)
    return list(runner([*tensors, *ints]))


def _ral_copy_(dst, src) -> None:
    """`dst.copy_(src)`, as an operator inductor leaves alone."""
    dst.copy_(src)


_lib.impl("ral_graph", _ral_graph, "CompositeImplicitAutograd")
_lib.impl("ral_copy_", _ral_copy_, "CompositeImplicitAutograd")


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


_COPY = torch.ops.aten.copy_.default


def _input_copies(gm: torch.fx.GraphModule) -> list:
    """`copy_(placeholder, value)` nodes: AOT's way to end a graph that mutates an input."""
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is _COPY and n.args[0].op == "placeholder" and not n.users
    ]


_SCALARS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


def _outside(gm: torch.fx.GraphModule) -> set:
    """Nodes that stay in inductor's graph: placeholders and the integer arithmetic on them
    (sizes a dynamic-shape forward hands its backward); inductor emits no kernel for them."""
    keep = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            keep.add(node)
        elif node.op == "call_function" and isinstance(_val(node), _SCALARS):
            # only numbers: a node of placeholders that yields tensors (a layer norm's
            # var_mean of a graph input gives a tuple) is computation and goes inside
            if all(a in keep for a in node.all_input_nodes):
                keep.add(node)
    return keep


def to_extern_call(gm: torch.fx.GraphModule) -> None:
    """Rewrite `gm` in place: its computation becomes one `torch_fl::ral_graph` call."""
    keep = _outside(gm)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    for node in gm.graph.nodes:
        if node.op == "placeholder" and not isinstance(_val(node), (torch.Tensor, torch.SymInt, int)):
            raise UnsupportedError(
                f"RAL_ERROR_UNSUPPORTED: torch.compile (inductor) on a ral device without host-mappable "
                f"memory: graph input {node.name} is a {type(_val(node)).__name__}"
            )
    copies = _input_copies(gm)
    tensors = [n for n in gm.graph.nodes if n.op == "placeholder" and isinstance(_val(n), torch.Tensor)]
    inside = [n for n in gm.graph.nodes if n not in keep and n.op != "output" and n not in copies]
    ints = []
    for n in inside:
        for a in n.all_input_nodes:
            if a in keep and not isinstance(_val(a), torch.Tensor) and a not in ints:
                ints.append(a)
    results = []
    for o in [*_flat(out_node.args[0]), *(c.args[1] for c in copies)]:
        if isinstance(o, torch.fx.Node) and o not in keep and o not in results:
            if not isinstance(_val(o), torch.Tensor):
                raise UnsupportedError(
                    f"RAL_ERROR_UNSUPPORTED: torch.compile (inductor) on a ral device without host-mappable "
                    f"memory: graph output {o.name} is a {type(_val(o)).__name__} computed from tensors"
                )
            results.append(o)

    # The subgraph: inputs (tensors, then integers), the computation, results.
    sub = torch.fx.Graph()
    env = {}
    for n in [*tensors, *ints]:
        env[n] = sub.placeholder(n.name)
        env[n].meta = dict(n.meta)
    for n in inside:
        env[n] = sub.node_copy(n, lambda a: env[a])
    sub.output(tuple(env[r] for r in results))
    _to_aten(sub)
    blob = encode(torch.fx.GraphModule(gm, sub))

    with gm.graph.inserting_before(out_node):
        call = gm.graph.call_function(torch.ops.torch_fl.ral_graph.default, (list(tensors), list(ints), blob))
        call.meta["val"] = [_val(r) for r in results]
        items = {}
        for i, r in enumerate(results):
            items[r] = gm.graph.call_function(operator.getitem, (call, i))
            items[r].meta = dict(r.meta)
        for c in copies:
            dst, src = c.args[0], c.args[1]
            gm.graph.call_function(torch.ops.torch_fl.ral_copy_.default, (dst, items.get(src, src)))
    out_node.args = (torch.fx.node.map_arg(out_node.args[0], lambda n: items.get(n, n)),)
    for n in [*copies, *reversed(inside)]:  # users before what they use
        gm.graph.erase_node(n)
    gm.graph.lint()
    gm.recompile()


def _to_aten(g: torch.fx.Graph) -> None:
    """Inductor's decompositions spell device and dtype changes as prims; the router knows
    them as `_to_copy` (a prim would take the cpu tier, which writes its result back to the
    device: a `device_put(x, cpu)` would stay on the device)."""
    prims, aten = torch.ops.prims, torch.ops.aten
    for n in g.nodes:
        if n.op != "call_function":
            continue
        if n.target is prims.device_put.default:
            n.kwargs = {"device": n.args[1]}
            n.args = (n.args[0],)
            n.target = aten._to_copy.default
        elif n.target is prims.convert_element_type.default:
            n.kwargs = {"dtype": n.args[1]}
            n.args = (n.args[0],)
            n.target = aten._to_copy.default


def _flat(x) -> list:
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flat(item)]
    return [x]
