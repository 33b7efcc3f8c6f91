"""`torch.compile(model, backend="ral")`: AOT autograd with the jit tier's fusion.

The forward and backward graphs AOT autograd produces are partitioned (torch.fx's
CapabilityBasedPartitioner) into maximal regions of pointwise ops that have jit templates;
each region runs inside a `fuse()` region, so the chain becomes one generated kernel per
shape group, and every other node calls the router directly (vendor kernels first).

Registered with Dynamo when this module is imported, and through the `torch_dynamo_backends`
entry point (pyproject.toml) when torch_fl is installed, so `import torch_fl` stays free of
torch._dynamo's import cost.
"""

from __future__ import annotations

import os

import torch

from torch_fl.jit.fusion import (
    _FUSED_NAME,
    _TO_COPY,
    STATS,
    FuseMode,
    _fusible,
    _run_eagerly,
    fuse,
    is_plain_cast,
    plan_group,
)
from torch_fl.tensor.ral_tensor import RalTensor
from torch_fl.tensor.transfer import empty_on
from torch_fl.tiers import launch as L


class _Recorder(FuseMode):
    """A fusion region that also keeps each launched group's plan, and notes whether every
    op of the partition was deferred (only then can the plans stand for the partition)."""

    bake_scalars = True  # a graph's scalars are constants: literals fold in the C compiler

    def __init__(self):
        super().__init__()
        self.plans = []
        self.complete = True

    def _ran_eagerly(self) -> None:
        self.complete = False

    def _launch(self, g, live):
        """Launch the flushed group, keeping its plan for replay."""
        plan = plan_group(g, live)
        if plan is None:
            self.complete = False
            _run_eagerly(g, live)
            return
        handle, tensors, scalars = plan
        if handle is not None:
            L.call(g.dev, handle, len(live), tensors, scalars, _FUSED_NAME, g.target.plugin, "torch_fl.fused")
        STATS["groups"] += 1
        STATS["fused_ops"] += len(g.nodes)
        self.plans.append((g.dev, g.target.plugin, handle, len(live), tensors, scalars))


class _Replay:
    """The launches of a recorded partition with tensors replaced by where they come from:
    ("in", i) a partition input, ("out", j, k) output k of launch j. Replaying allocates
    the outputs and launches the kernels: no per-op dispatch, tracing or code generation."""

    def __init__(self, plans, inputs, result):
        where = {id(t): ("in", i) for i, t in enumerate(inputs) if type(t) is RalTensor}
        self.launches = []
        for j, (dev, plugin, handle, n_out, tensors, scalars) in enumerate(plans):
            outs = [(tuple(t.shape), t.dtype, t.stride()) for t, _, _ in tensors[:n_out]]
            for k, (t, _, _) in enumerate(tensors[:n_out]):
                where[id(t)] = ("out", j, k)
            srcs = [(where[id(t)], shape, strides) for t, shape, strides in tensors[n_out:]]
            outs_geo = [(shape, strides) for _, shape, strides in tensors[:n_out]]
            self.launches.append((dev, plugin, handle, outs, outs_geo, srcs, scalars))
        single = isinstance(result, torch.Tensor)
        self.single = single
        self.result = [where[id(t)] for t in ((result,) if single else result)]

    def __call__(self, args):
        made = []

        def get(ref):
            return args[ref[1]] if ref[0] == "in" else made[ref[1]][ref[2]]

        for dev, plugin, handle, outs, outs_geo, srcs, scalars in self.launches:
            fresh = [empty_on(dev, shape, dtype, strides) for shape, dtype, strides in outs]
            made.append(fresh)
            if handle is None:
                continue
            tensors = [(t, shape, strides) for t, (shape, strides) in zip(fresh, outs_geo)]
            tensors += [(get(ref), shape, strides) for ref, shape, strides in srcs]
            L.call(dev, handle, len(fresh), tensors, scalars, _FUSED_NAME, plugin, "torch_fl.fused")
        res = [get(r) for r in self.result]
        return res[0] if self.single else tuple(res)


def replay_key(args) -> tuple | None:
    """What a recorded partition's launches depend on: every tensor input's shape, strides,
    dtype and device, and every other input's value (baked into the kernels). None when an
    input is neither (the partition then runs as a fuse() region)."""
    key = []
    for a in args:
        if type(a) is RalTensor:
            key.append((a.shape, a.stride(), a.dtype, a._dev))
        elif a is None or type(a) in (int, bool):
            key.append((type(a), a))
        elif type(a) is float:  # by text: -0.0 and 0.0 bake differently, NaN equals itself
            key.append((float, repr(a)))
        else:
            return None
    return tuple(key)


MAX_REPLAYS = 16  # recorded geometries per partition (dynamic shapes record one per size seen)


class _FusedRegion(torch.nn.Module):
    """One partition of pointwise nodes: recorded as fused launches once per input geometry
    (dynamic shapes call one graph with many sizes), then replayed."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__()
        self.gm = gm
        self.replays: dict = {}
        self.tries: dict = {}

    def forward(self, *args):
        """Replay the partition's kernels, or record them (falls back to a fuse() region)."""
        key = replay_key(args)
        replay = self.replays.get(key)
        if replay is not None:
            return replay(args)
        if key is None or self.tries.get(key, 0) >= 2 or len(self.replays) >= MAX_REPLAYS:
            with fuse():
                return self.gm(*args)
        self.tries[key] = self.tries.get(key, 0) + 1
        rec = _Recorder()
        with rec:
            out = self.gm(*args)
        outs = (out,) if isinstance(out, torch.Tensor) else out
        if rec.complete and rec.plans and all(type(t) is RalTensor for t in outs):
            try:
                self.replays[key] = _Replay(rec.plans, args, out)
            except KeyError:  # an output or source the plans do not produce
                pass
        return out


# Math calls PoCL does not vectorise inside a generated kernel (one scalar libm call per
# work-item): a fused `tanh(x * 0.5) + x` on 524k floats took 5.9 ms, exp 3.4 ms, against the
# OpenCL plugin's own tanh at 0.5 ms (its kernels compute 16 lanes at a time). On OpenCL
# devices these ops stay out of fused regions and take the vendor kernel; the chains around
# them still fuse. `TORCH_FL_CL_FUSE_MATH=1` fuses them anyway. A float32 tanh fuses: the
# kernel's 16-lane loops compute it as the plugin's kernel does (codegen_opencl.TANH16).
OPENCL_UNFUSED_MATH = frozenset({"tanh", "exp", "erf", "log", "sigmoid", "sin", "cos", "gelu", "silu"})
OPENCL_VECTOR_MATH = frozenset({"tanh"})  # float32: fused, vectorised (vector_cl.VECTOR_CALLS)
VECTOR_MATH = True  # tests switch it off: float32 tanh then stays out of fused regions too


def _opencl_math(node, vector_fuses: bool = True) -> bool:
    """A transcendental op whose result lives on a device whose jit language is OpenCL C (with
    `vector_fuses`, not one a fused kernel computes 16 lanes at a time: a float32 tanh)."""
    if node.target.__name__.split(".")[0] not in OPENCL_UNFUSED_MATH or os.environ.get("TORCH_FL_CL_FUSE_MATH") == "1":
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.device.type != "ral":
        return False
    vector = node.target.__name__.split(".")[0] in OPENCL_VECTOR_MATH and val.dtype == torch.float32
    if vector_fuses and VECTOR_MATH and vector:
        return False
    from torch_fl.jit.target import target_of

    target = target_of(val.device.index or 0)
    return target is not None and target.lang == "opencl-c"


def _supported(node) -> bool:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) or not _fusible(node.target):
        return False
    if _opencl_math(node):
        return False
    if node.target is _TO_COPY:
        src = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
        return isinstance(src, torch.Tensor) and is_plain_cast(dict(node.kwargs), src.device)
    return True


_IDENTITY = (torch.ops.aten.detach.default, torch.ops.aten.alias.default)


def drop_detaches(gm: torch.fx.GraphModule) -> None:
    """Bypass detach/alias nodes that feed only other nodes.

    AOT autograd's graphs run without autograd, so `detach` (it marks tensors that
    tanh/sigmoid backward save) is an identity there; left in, it splits a pointwise chain
    into several kernels. A detach that is a graph output stays: its aliasing is part of
    the graph's contract with AOT's runtime wrappers."""
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in _IDENTITY and all(u.op != "output" for u in node.users):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.graph.lint()


_aten = torch.ops.aten
_KEEPS_LAYOUT = (None, torch.preserve_format, torch.contiguous_format)


def drop_clones(gm: torch.fx.GraphModule) -> int:
    """Bypass `clone` of a contiguous tensor whose users are all functional non-view ops.

    Such a clone is a full copy that changes nothing the users can see: in a functional
    graph nobody mutates the source, and a non-view user makes its own result. GPT-2's
    dropout with p=0 leaves two per layer ([4,128,256] before each residual add). Clones
    feeding views or the graph's outputs stay (aliasing is part of AOT's contract).
    Returns how many clones were removed."""
    done = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _aten.clone.default:
            continue
        src = node.args[0]
        sv = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
        if not isinstance(sv, torch.Tensor) or not sv.is_contiguous():
            continue
        if node.kwargs.get("memory_format") not in _KEEPS_LAYOUT:
            continue
        ok = True
        for user in node.users:
            t = user.target
            if user.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
                ok = False
            elif t._schema.is_mutable or any(r.alias_info is not None for r in t._schema.returns):
                ok = False
        if not ok:
            continue
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)
        done += 1
    if done:
        gm.graph.lint()
    return done


_FILLS = (_aten.fill.Scalar, _aten.full_like.default)


def _scalar_form(user, fill, value):
    """(target, args, kwargs) of `user` with the constant tensor `fill` as a Python scalar, or None."""
    a, b = user.args[0], user.args[1]
    alpha = user.kwargs.get("alpha", 1)
    t = user.target
    if t is _aten.mul.Tensor:
        return _aten.mul.Scalar, (b if a is fill else a, value), {}
    if t is _aten.add.Tensor:
        if b is fill:
            return _aten.add.Scalar, (a, value), dict(user.kwargs)
        return (_aten.add.Scalar, (b, value), {}) if alpha == 1 else None
    if t is _aten.sub.Tensor:
        if b is fill:
            return _aten.sub.Scalar, (a, value), dict(user.kwargs)
        return _aten.rsub.Scalar, (b, value), dict(user.kwargs)
    if t is _aten.div.Tensor and b is fill:
        return _aten.div.Scalar, (a, value), {}
    return None


def inline_fills(gm: torch.fx.GraphModule) -> int:
    """Turn `fill(empty_like(x), v)` / `full_like(x, v)` operands of add/sub/mul/div into scalars.

    Decompositions build constant tensors this way (silu's backward: `ones - sigmoid(x)`). The
    fill is no fusible op, so the min-cut partitioner saves its neighbours instead of recomputing
    them, and the fused-region partitioner keeps `sigmoid(x)` out of the backward's kernel (the
    kernel would feed empty_like, which feeds the kernel: a cycle). Only users whose result
    keeps its shape and dtype are rewritten: the scalar form computes the same values.
    Returns how many users were rewritten."""
    done = 0
    for fill in list(gm.graph.nodes):
        if fill.op != "call_function" or fill.target not in _FILLS or fill.kwargs.get("dtype") is not None:
            continue
        value = fill.args[1]
        fv = fill.meta.get("val")
        if type(value) not in (int, float, bool) or not isinstance(fv, torch.Tensor):
            continue
        for user in list(fill.users):
            uv = user.meta.get("val")
            if user.op != "call_function" or len(user.args) != 2 or not isinstance(uv, torch.Tensor):
                continue
            other = user.args[1] if user.args[0] is fill else user.args[0]
            ov = other.meta.get("val") if isinstance(other, torch.fx.Node) else None
            if other is fill or not isinstance(ov, torch.Tensor):
                continue
            if not (ov.shape == uv.shape == fv.shape and ov.dtype == uv.dtype == fv.dtype):
                continue
            form = _scalar_form(user, fill, value)
            if form is None:
                continue
            with gm.graph.inserting_before(user):
                new = gm.graph.call_function(*form)
            new.meta = dict(user.meta)
            user.replace_all_uses_with(new)
            gm.graph.erase_node(user)
            done += 1
    if done:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
    return done


def _joint_partition(joint, joint_inputs, **kwargs):
    """Inductor's min-cut partitioner on a joint graph cleaned of what misleads it.

    Left in, `detach` (no fusible op in its tables) marks every tensor an op saves for its
    backward as materialised there, so the forward writes out sigmoid/tanh/exp results the
    backward's fused kernel could recompute from their inputs; constant fills do the same."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from torch_fl.jit.causal_mask import rewrite

    rewrite(joint)  # a constant causal mask as is_causal, before the backward is cut off
    drop_detaches(joint)
    inline_fills(joint)
    save_opencl_math(joint)
    joint.recompile()
    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


SAVE_MATH = True  # tests switch it off to show what saving changes


def save_opencl_math(joint) -> int:
    """Mark the math calls that stay out of fused regions on OpenCL devices (`_opencl_math`)
    in a joint graph (a GraphModule or its Graph) as saved for the backward, never recomputed
    there; returns how many.

    The min-cut partitioner counts pointwise ops as free to recompute inside the backward's
    fused kernels. These are not fused, or (a float32 tanh) fused at the cost of PoCL's
    vector tanh: recomputing GPT-2's tanh-GELU in the backward was the cube chain's kernel and
    the plugin's tanh again per layer, where the forward writes the tanh anyway; fused, the
    forward's kernel writes it as one more output, and the backward's reads it. The mark is the one selective activation checkpointing
    uses (`torch.utils.checkpoint.CheckpointPolicy`); the partitioner saves such a node only
    where the backward needs it, and a policy already on a node (a user's) is kept."""
    if not SAVE_MATH:
        return 0
    from torch.utils.checkpoint import CheckpointPolicy

    graph = joint.graph if isinstance(joint, torch.fx.GraphModule) else joint
    n = 0
    for node in graph.nodes:
        if (
            node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and _opencl_math(node, vector_fuses=False)
        ):
            if "recompute" not in node.meta:
                node.meta["recompute"] = CheckpointPolicy.MUST_SAVE
                n += 1
    return n


_FOLD_MAX_BYTES = 64 << 20  # a folded constant stays resident for the graph's lifetime
FOLD = True  # tests switch it off to show what folding changes


def _foldable(node) -> bool:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if node.target._schema.is_mutable or torch.Tag.nondeterministic_seeded in node.target.tags:
        return False
    return True


def _overlapping(t: torch.Tensor) -> bool:
    """Elements share memory (an expanded dim): in-place writes into it are refused."""
    return any(st == 0 and sz > 1 for sz, st in zip(t.shape, t.stride()))


def fold_constants(gm: torch.fx.GraphModule) -> int:
    """Evaluate once the nodes that depend on no graph input, keep the results as attributes.

    GPT-2's attention mask (arange, cumsum, 4 index.Tensor, comparisons, where) depends only
    on shapes: unfolded it runs every step, and index/cumsum take the cpu tier, each a stream
    sync. Graphs are specialised on shapes, so the values are fixed. Random and mutating ops
    and results over 64 MiB are left in place. A value the graph returns must stay the
    caller's own tensor: a contiguous one is returned as a clone of the constant (one copy),
    an expanded view (which no one can write through; GPT-2's mask, saved for the backward)
    is taken again from its folded input each call; any other stays in place with what it
    is computed from. Returns how many nodes were replaced by constants."""
    const, values = set(), {}
    for node in gm.graph.nodes:
        if not _foldable(node) or not all(a in const for a in node.all_input_nodes):
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: values[a])
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily(), torch.no_grad():
            out = node.target(*args, **kwargs)
        if not isinstance(out, torch.Tensor) or out.numel() * out.element_size() > _FOLD_MAX_BYTES:
            continue
        const.add(node)
        values[node] = out
    returned = {n for n in const if any(u.op == "output" for u in n.users)}
    const -= {n for n in returned if _overlapping(values[n])}  # a view of the folded input
    folded = 0
    for node in list(gm.graph.nodes):
        if node not in const or all(u in const for u in node.users):
            continue
        if node in returned and not values[node].is_contiguous():
            continue  # the caller may write through what the graph returns
        name = f"_folded_{folded}"
        gm.register_buffer(name, values[node], persistent=False)
        with gm.graph.inserting_before(node):
            attr = gm.graph.get_attr(name)
        attr.meta = dict(node.meta)
        node.replace_all_uses_with(attr)
        if node in returned:
            out = next(u for u in attr.users if u.op == "output")
            with gm.graph.inserting_before(out):
                mine = gm.graph.call_function(_aten.clone.default, (attr,))
            mine.meta = dict(node.meta)
            out.replace_input_with(attr, mine)
        folded += 1
    if folded:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return folded


def partition(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Group fusible pointwise nodes into submodules that run as fusion regions."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

    from torch_fl.jit.causal_mask import rewrite

    rewrite(gm)  # inference graphs (no joint graph): a constant causal mask as is_causal
    drop_detaches(gm)
    inline_fills(gm)
    drop_clones(gm)
    if FOLD:
        fold_constants(gm)
    from torch.fx.passes.operator_support import OperatorSupport

    class _Support(OperatorSupport):
        def is_node_supported(self, submodules, node) -> bool:
            return _supported(node)

    parts = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=False).propose_partitions()
    if not parts:
        return gm
    fused = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=False).fuse_partitions(parts)
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target.startswith("fused_"):
            setattr(fused, node.target, _FusedRegion(getattr(fused, node.target)))
    fused.recompile()
    return fused


def _compiler(gm: torch.fx.GraphModule, example_inputs):
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(partition(gm).forward)


def ral_backend(gm: torch.fx.GraphModule, example_inputs):
    """The Dynamo backend: AOT autograd, fw/bw graphs partitioned into fused pointwise regions."""
    from torch._dynamo.backends.common import aot_autograd

    # The min-cut partitioner (inductor's) saves fewer activations: the backward recomputes
    # cheap pointwise values inside its fused kernels instead of the forward writing them out.
    return aot_autograd(fw_compiler=_compiler, bw_compiler=_compiler, partition_fn=_joint_partition)(gm, example_inputs)


def register() -> None:
    """Make backend="ral" known to Dynamo (imports torch._dynamo)."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    # Loaded through the entry point, Dynamo registers the backend itself right after.
    if "ral" not in _COMPILER_FNS and _BACKENDS.get("ral") is None:
        register_backend(ral_backend, name="ral")


register()
