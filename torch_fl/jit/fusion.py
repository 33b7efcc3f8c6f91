"""Fusion regions: chains of pointwise ops on one device run as one generated kernel.

Inside `with fuse():` a TorchDispatchMode defers each functional pointwise op on ral
tensors: it hands back a placeholder RalTensor (its buffer is allocated, its values are
not yet computed) and records the op in a pending group. The group is generated,
compiled and launched as one kernel ("flushed") at the first op that cannot be deferred
(anything not pointwise, any in-place or view op, a different shape), at any sync point
or copy to the host (a sync observer), and at region exit. Only placeholders still alive
when the group flushes are written; dead intermediates live in registers only. If the
kernel cannot be built, the recorded ops run eagerly instead, so nothing is lost.
"""

from __future__ import annotations

import os
import time
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_fl._native import ffi
from torch_fl.device.sync import SYNC_OBSERVERS
from torch_fl.dispatch import entry as _dispatch_mod
from torch_fl.dispatch.entry import dispatch
from torch_fl.jit.codegen_opencl import coalesce
from torch_fl.jit.expr import cast, lift, var
from torch_fl.jit.kernel_cache import compile_kernel
from torch_fl.jit.pointwise import _RUNTIME_TYPES, Unfit, check_dtypes, compute_dtype, geometry_scalars, source_for
from torch_fl.jit.spec import PointwiseSpec, as_stored, opmath
from torch_fl.jit.target import target_of
from torch_fl.jit.templates import Ctx, Template, template_for
from torch_fl.jit.vector_cl import vectorizable
from torch_fl.tensor.op_schema import NO_PROMOTE_ARGS, NON_TENSOR, TENSOR_LIST, schema_of
from torch_fl.tensor.ral_tensor import RalTensor
from torch_fl.tensor.transfer import empty_on
from torch_fl.tiers import launch as L
from torch_fl.tiers.packing import expand_strides, scalar_words
from torch_fl.tiers.vendor import to_meta

# A group flushes before it would pass this many tensors: OpenCL kernels take their
# arguments one by one (argument limits); the host's C kernels get one descriptor array.
# Counted are the leaves and the placeholders still alive (only those become outputs; one
# dead now stays dead), so a long chain whose intermediates die is not cut in the middle.
MAX_TENSORS = 12
MAX_TENSORS_HOST = 256
# Fused kernels launched so far (tests and benchmarks read it).
STATS = {"groups": 0, "fused_ops": 0, "eager_fallbacks": 0}


class _Ref:
    """Stands for the result of pending node `i` in a recorded argument list."""

    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


class _Group:
    """Pending nodes that share one device and one output shape."""

    def __init__(self, dev, shape, target):
        self.dev = dev
        self.shape = shape
        self.target = target
        self.leaves = []  # real RalTensors (strong refs: the kernel reads them)
        self.leaf_of = {}  # id(tensor) -> leaf index
        self.scalars = []  # (value, dtype, tag)
        self.nodes = []  # (func, args, kwargs with _Ref markers, weakref(placeholder), out dtype)
        self.lets = []  # (name, E)
        self.node_of = {}  # id(placeholder) -> node index

    def prune(self) -> None:
        """Forget placeholders no one holds any more: `node_of` keeps the live ones, which
        are the group's outputs if it flushed now (a dead one's id may come back as another
        tensor's, which must then count as a leaf)."""
        dead = [k for k, i in self.node_of.items() if self.nodes[i][3]() is None]
        for k in dead:
            del self.node_of[k]


_META: dict = {}
# Ops whose scalars are baked into the source even in eager regions: pow's exponent picks the
# kernel's form (x*x*x for 3). As a run-time value, a kernel with several outputs evaluated
# the select chain per element, and its pow() fallback on negative bases left libmvec's vector
# path: GPT-2's gelu_new ran 15x slower than unfused. Programs use few distinct exponents.
_BAKED_OPS = frozenset({torch.ops.aten.pow.Tensor_Scalar})

# A dtype conversion on its own device (autocast's casts around half-precision matmuls) is
# pointwise without the pointwise tag, and not in the templates' table: that table also
# routes single ops to the jit, and _to_copy is the transfer op. Only casts to a floating
# dtype fuse: C's float -> int/bool conversions differ from torch's at NaN, inf, overflow.
_TO_COPY = torch.ops.aten._to_copy.default
_CAST = Template(lambda k, a, *_settings: a, ints=True)
_CAST_KWARGS = frozenset({"dtype", "device", "layout", "pin_memory", "non_blocking", "memory_format"})


def is_plain_cast(kwargs: dict, src_device: torch.device) -> bool:
    """Whether `_to_copy(x, **kwargs)` only converts x (on src_device) to a floating dtype."""
    dt, dev = kwargs.get("dtype"), kwargs.get("device")
    return (
        set(kwargs) <= _CAST_KWARGS
        and isinstance(dt, torch.dtype)
        and dt.is_floating_point
        and (dev is None or torch.device(dev) == src_device)
        and kwargs.get("layout") in (None, torch.strided)
        and not kwargs.get("pin_memory")
        and kwargs.get("memory_format") in (None, torch.preserve_format, torch.contiguous_format)
    )


def _meta_out(func, args, kwargs, key):
    r = _META.get(key)
    if r is None:
        res = func(*[to_meta(a) for a in args], **{k: to_meta(v) for k, v in kwargs.items()})
        r = _META[key] = (tuple(res.shape), res.dtype, res.stride()) if isinstance(res, torch.Tensor) else None
    return r


class FuseMode(TorchDispatchMode):
    """The dispatch mode of a fusion region (see the module docstring)."""

    # Scalars become literals in the source instead of run-time arguments. The compile
    # backend sets it: a graph's scalars are constants, and a literal lets the C compiler fold
    # them and templates pick a form (pow's exponent) when generating, not per element.
    bake_scalars = False

    def __init__(self):
        super().__init__()
        self.group: _Group | None = None
        self._flushing = False
        self._observer = self._on_sync

    # -- region lifecycle
    def __enter__(self):
        SYNC_OBSERVERS.append(self._observer)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            self.flush()
        finally:
            try:
                SYNC_OBSERVERS.remove(self._observer)
            except ValueError:
                pass
            super().__exit__(*exc)

    def _on_sync(self, dev, reason):
        if self.group is not None and not self._flushing:
            self.flush()

    # -- interception
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._flushing:
            # A group run op by op after a failed compile: a decomposing op's parts
            # (hardshrink: abs, le, where) must run now, not join a group of their own.
            return func(*args, **kwargs)
        if self.group is not None or _fusible(func):
            try:
                out = self._defer(func, args, kwargs)
            except Unfit:
                out = None
            if out is not None:
                return out
        self._ran_eagerly()
        self.flush()
        return func(*args, **kwargs)

    def _ran_eagerly(self) -> None:
        """Hook for subclasses: an op is about to run outside every fused group."""

    def _defer(self, func, args, kwargs):
        if not _fusible(func):
            return None
        if func is _TO_COPY:
            if not args or type(args[0]) is not RalTensor or not is_plain_cast(kwargs, args[0].device):
                return None
            # the device is the input's: dropped, so the meta run stays on meta
            kwargs = {k: v for k, v in kwargs.items() if k in ("dtype", "memory_format")}
        sch = schema_of(func)
        full = sch.normalize(args, kwargs)
        dev = -1
        key = [func]
        for pos, v in enumerate(full):
            k = sch.kinds[pos]
            if k == TENSOR_LIST:
                return None
            if k == NON_TENSOR:
                ts = sch.type_strs[pos]
                if ts.startswith("Generator"):
                    return None
                key.append(type(v) if ts in _RUNTIME_TYPES else v)
                continue
            if type(v) is RalTensor:
                if dev >= 0 and v._dev != dev:
                    return None
                dev = v._dev
                key.append((tuple(v.shape), v.dtype, v.stride()))  # the output follows input layouts
            elif v is None or isinstance(v, (bool, int, float)):
                key.append(type(v))
            else:
                return None  # CPU tensors and anything unusual run eagerly
        if dev < 0:
            return None
        target = target_of(dev)
        if target is None:
            return None
        meta = _meta_out(func, args, kwargs, tuple(key))
        if meta is None:
            return None
        shape, out_dtype, strides = meta
        g = self.group
        if g is not None and (g.dev != dev or g.shape != shape):
            self.flush()
            g = None
        pending = [v for v in full if type(v) is RalTensor and g is not None and id(v) in g.node_of]
        if g is None:
            g = self.group = _Group(dev, shape, target)
        limit = MAX_TENSORS_HOST if g.target.lang == "c" else MAX_TENSORS
        if len(g.leaves) + len(full) + len(g.node_of) + 1 > limit:  # near the limit: drop the dead
            g.prune()
        new_leaves = {id(v) for v in full if type(v) is RalTensor and id(v) not in g.node_of and id(v) not in g.leaf_of}
        if len(g.leaves) + len(new_leaves) + len(g.node_of) + 1 > limit:
            self.flush()
            return self._defer(func, args, kwargs)
        del pending
        return self._record(g, func, sch, full, args, kwargs, shape, out_dtype, strides)

    def _record(self, g, func, sch, full, args, kwargs, shape, out_dtype, strides):
        tmpl = _CAST if func is _TO_COPY else template_for(func)
        promo = []
        for pos, v in enumerate(full):
            if v is None or sch.names[pos] in NO_PROMOTE_ARGS:
                continue
            if sch.kinds[pos] != NON_TENSOR or sch.type_strs[pos] == "number":
                promo.append(torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v)
        ct = opmath(compute_dtype(promo, torch.bool if tmpl.compares else out_dtype))
        if not ct.is_floating_point and not tmpl.ints:
            raise Unfit("int")
        stored = {out_dtype} | {v.dtype for v in full if isinstance(v, torch.Tensor)}
        check_dtypes(g.target, {ct} | (stored - g.target.lowp))
        tag = "f" if ct.is_floating_point else "i"
        leaves, scal_added, leaf_added = [], 0, []
        for pos, v in enumerate(full):
            if pos in sch.out_positions:
                continue
            k = sch.kinds[pos]
            if type(v) is RalTensor:
                ni = g.node_of.get(id(v))
                if ni is not None:
                    leaf = var(f"v{ni}", g.lets[ni][1].dt)
                else:
                    li = g.leaf_of.get(id(v))
                    if li is None:
                        li = g.leaf_of[id(v)] = len(g.leaves)
                        g.leaves.append(v)
                        leaf_added.append(id(v))
                    leaf = var(f"a{li}", opmath(v.dtype))
                leaves.append(leaf if sch.names[pos] in NO_PROMOTE_ARGS else cast(leaf, ct))
            elif v is not None and (k != NON_TENSOR or sch.type_strs[pos] in _RUNTIME_TYPES):
                if (self.bake_scalars or func in _BAKED_OPS) and type(v) in (bool, int, float):
                    leaves.append(lift(float(v) if tag == "f" else int(v), ct))
                    continue
                j = len(g.scalars)
                g.scalars.append((v, ct, tag))
                scal_added += 1
                leaves.append(var(f"s{j}", ct))
            else:
                leaves.append(v)
        e = tmpl.fn(Ctx(ct), *leaves)
        if e is None:  # undo: the op runs eagerly after a flush
            for _ in range(scal_added):
                g.scalars.pop()
            for i in leaf_added:
                del g.leaf_of[i]
                g.leaves.pop()
            raise Unfit("template declined")
        dev = g.dev
        # eager's output layout (a pointwise op on transposed inputs gives a transposed result):
        # code after the region may view it in ways only that layout allows
        ph = empty_on(dev, shape, out_dtype, strides)
        idx = len(g.nodes)
        marks = {i: _Ref(ni) for i, ni in g.node_of.items()}
        rec_args = _mark(args, marks)
        rec_kwargs = {kk: _mark(vv, marks) for kk, vv in kwargs.items()}
        g.nodes.append((func, rec_args, rec_kwargs, weakref.ref(ph), out_dtype))
        g.lets.append((f"v{idx}", as_stored(e, out_dtype)))
        g.node_of[id(ph)] = idx
        if _dispatch_mod.OBSERVERS:
            t = time.perf_counter()
            for obs in _dispatch_mod.OBSERVERS:
                obs(sch.name, "jit", dev, t, t, full)
        return ph

    # -- flushing
    def flush(self):
        """Generate, compile and launch the pending group (or run it eagerly if that fails)."""
        g = self.group
        if g is None or self._flushing:
            return
        self._flushing = True
        self.group = None
        try:
            live = [(i, node[3]()) for i, node in enumerate(g.nodes)]
            live = [(i, t) for i, t in live if t is not None]
            if live:
                self._launch(g, live)
        finally:
            self._flushing = False

    def _launch(self, g: _Group, live) -> None:
        """Run a flushed group whose `live` nodes (index, result) still have users."""
        if not _launch_group(g, live):
            _run_eagerly(g, live)


def _mark(v, marks):
    if type(v) is RalTensor:
        return marks.get(id(v), v)
    if isinstance(v, (list, tuple)):
        return type(v)(_mark(x, marks) for x in v)
    return v


def _fusible(func) -> bool:
    if func is _TO_COPY:  # when is_plain_cast says so
        return True
    sch = schema_of(func)
    return (
        sch.pointwise
        and not (sch.is_view or sch.is_inplace or sch.is_out)
        and sch.n_returns == 1
        and template_for(func) is not None
    )


def _launch_group(g: _Group, live) -> bool:
    """One kernel for the whole group; False if it cannot be built."""
    plan = plan_group(g, live)
    if plan is None:
        return False
    handle, tensors, scalars = plan
    if handle is not None:
        L.call(g.dev, handle, len(live), tensors, scalars, _FUSED_NAME, g.target.plugin, "torch_fl.fused")
    STATS["groups"] += 1
    STATS["fused_ops"] += len(g.nodes)
    return True


def plan_group(g: _Group, live):
    """(kernel handle or None for an empty shape, launch tensors, scalar words) of a group, or
    None if it cannot be built. The compile backend replays such plans without re-recording."""
    target = g.target
    shape = g.shape
    tensors = [(t, shape, t.stride()) for _, t in live]
    tensors += [(t, shape, expand_strides(t, shape)) for t in g.leaves]
    if tensors:
        # Walk the elements in the first output's memory order (an elementwise kernel may
        # visit them in any order): tensors that share a transposed layout stay dense.
        order = sorted(range(len(shape)), key=lambda d: -tensors[0][2][d])
        shape = tuple(shape[d] for d in order)
        tensors = [(t, shape, tuple(st[d] for d in order)) for t, _, st in tensors]
    spec = PointwiseSpec(
        outs=[t.dtype for _, t in live],
        ins=[t.dtype for t in g.leaves],
        scalars=[(dt, tag) for _, dt, tag in g.scalars],
        lets=list(g.lets),
    )
    for o, (i, _) in enumerate(live):
        spec.stores.append((o, var(f"v{i}", g.lets[i][1].dt)))
    if target.lang == "c" and tensors and all(shape):
        shape, tensors, spec.inner_steps = _row_geometry(shape, tensors, len(live))
    elif target.lang == "opencl-c" and tensors and all(shape) and vectorizable(spec):
        spec.inner_steps = _row_geometry(shape, tensors, len(live))[2]  # codegen_opencl's vector rows
    source, name = source_for(target, spec)
    handle = compile_kernel(target, source, name)
    if handle is None:
        return None
    scalars = [scalar_words(v, dt, tag, target.lang) for v, dt, tag in g.scalars]
    if target.lang == "opencl-c":
        try:
            scalars += geometry_scalars(shape, [t[2] for t in tensors])
        except Unfit:
            return None
    if any(d == 0 for d in shape):
        handle = None
    return handle, tensors, scalars


def _row_geometry(shape, tensors, n_out):
    """Dims merged where every tensor allows (fewer, longer rows), and, for a launch the flat
    loop cannot take, each input's innermost stride when that dim is contiguous in the
    outputs and contiguous or broadcast along it (stride 0) in the inputs (codegen_c's
    vectorised row loop), else None."""
    sizes, strides = coalesce(shape, [st for _, _, st in tensors])
    sizes = tuple(sizes)
    merged = [(t, sizes, tuple(st)) for (t, _, _), st in zip(tensors, strides)]
    last = [st[-1] for st in strides]
    dense = len(sizes) == 1 and all(s == 1 for s in last)  # the kernel's flat loop takes it
    unit = not dense and all(s == 1 for s in last[:n_out]) and all(s in (0, 1) for s in last[n_out:])
    return sizes, merged, tuple(last[n_out:]) if unit else None


_FUSED_NAME = ffi.new("char[]", b"torch_fl.fused")


def _run_eagerly(g: _Group, live) -> None:
    """Replay the recorded ops one by one through the router, then fill the live placeholders."""
    STATS["eager_fallbacks"] += 1
    results = []

    def resolve(v):
        if type(v) is _Ref:
            return results[v.i]
        if isinstance(v, (list, tuple)):
            return type(v)(resolve(x) for x in v)
        return v

    for func, args, kwargs, _, _ in g.nodes:
        results.append(dispatch(func, resolve(args), {k: resolve(v) for k, v in kwargs.items()}))
    for i, t in live:
        dispatch(torch.ops.aten.copy_.default, (t, results[i]), {})


class fuse:
    """`with torch_fl.fuse():` runs chains of pointwise ops on ral tensors as fused kernels."""

    def __enter__(self):
        self._mode = FuseMode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


def enabled_by_default() -> bool:
    """Whether ral_mode opens a fusion region: opt-in with TORCH_FL_FUSE=1.

    Off by default: deferring each op costs Python work (a meta shape check, a pending
    group) that small tensors do not earn back. On the GPT-2-shaped benchmark auto-fusion
    made the ral_mode forward 1.09x eager CPU instead of 0.87x, and the training step 1.28x
    instead of 0.96x, while a long chain on large tensors runs 6x faster fused
    (benchmarks/run.py --only jit gpt2_forward gpt2_train). Explicit
    `with torch_fl.fuse():` regions always fuse."""
    return os.environ.get("TORCH_FL_FUSE", "0").strip() in ("1", "true", "on", "yes")


def install_auto(mode_cls) -> None:
    """Make `mode_cls` (ral_mode) open a fusion region for its duration."""
    enter, exit_ = mode_cls.__enter__, mode_cls.__exit__

    def __enter__(self):
        self._fl_fuse = fuse() if enabled_by_default() else None
        r = enter(self)
        if self._fl_fuse is not None:
            self._fl_fuse.__enter__()
        return r

    def __exit__(self, *exc):
        f = getattr(self, "_fl_fuse", None)
        try:
            if f is not None:
                f.__exit__(*exc)
        finally:
            r = exit_(self, *exc)
        return r

    mode_cls.__enter__ = __enter__
    mode_cls.__exit__ = __exit__
