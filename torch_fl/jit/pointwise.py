"""JitRun for one pointwise op: broadcasting, type promotion, scalars and any strides."""

from __future__ import annotations

from threading import get_ident

import torch

from torch_fl._native import ffi, lib
from torch_fl.core.runtime import raise_status
from torch_fl.device.memory import allocate
from torch_fl.device.stream_state import current
from torch_fl.jit.codegen_c import pointwise_c
from torch_fl.jit.codegen_opencl import RMAX, coalesce, pointwise_cl
from torch_fl.jit.expr import cast, var
from torch_fl.jit.kernel_cache import compile_kernel, kernel_name
from torch_fl.jit.spec import PointwiseSpec
from torch_fl.jit.target import Target, target_of
from torch_fl.jit.templates import Ctx, template_for
from torch_fl.tensor.layout import contiguous_strides, elementwise_strides
from torch_fl.tensor.op_schema import NO_PROMOTE_ARGS, NON_TENSOR, TENSOR_LIST
from torch_fl.tensor.ral_tensor import RalTensor, wrap
from torch_fl.tensor.transfer import empty_on
from torch_fl.tiers import launch as L
from torch_fl.tiers.packing import TAG_FLOAT, expand_strides, pack_call, scalar_words
from torch_fl.tiers.vendor import meta_run, to_meta

_NAME = "RLK_NAME"
# Operand kinds of a planned call.
IN_TENSOR, IN_SCALAR, IN_CPU0 = 0, 1, 2


# Non-tensor argument types passed at run time (torch prints Scalar as "number", and an
# optional one as "number?" or "Optional[number]" depending on the version); their values
# never change the generated source, so one kernel serves every value.
_RUNTIME_TYPES = frozenset(
    {"number", "float", "Scalar"}
    | {f"{t}?" for t in ("number", "float", "Scalar")}
    | {f"Optional[{t}]" for t in ("number", "float", "Scalar")}
)


class Unfit(Exception):
    """This call cannot be generated; the jit tier declines it."""


def compute_dtype(operands, out_dtype: torch.dtype) -> torch.dtype:
    """The dtype a pointwise op computes in: its float result, else the operands' promotion
    (a bool result: a comparison; its Scalar operands count, as `int_tensor < 0.5` is float)."""
    if out_dtype.is_floating_point:
        return out_dtype
    if out_dtype != torch.bool or not operands:
        return out_dtype
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, res = elementwise_dtypes(*operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return res


def source_for(target: Target, spec: PointwiseSpec) -> tuple[str, str]:
    """(source, kernel name) of a pointwise spec on a target; the name hashes the source."""
    gen = pointwise_c if target.lang == "c" else pointwise_cl
    text = gen(spec, _NAME, target.ctype)
    name = kernel_name(target.lang + text) + ("_chunks" if target.lang == "opencl-c" else "")
    return text.replace(_NAME, name), name


def check_dtypes(target: Target, dtypes) -> None:
    """Raise Unfit unless the target stores and computes every dtype of the kernel."""
    for dt in dtypes:
        if dt not in target.dtypes:
            raise Unfit(f"dtype {dt} not generated for {target.lang}")


def geometry_scalars(out_shape, strides_per_tensor) -> list:
    """OpenCL's trailing INT scalars: dense flag, RMAX sizes, RMAX strides per tensor."""
    sizes, sts = coalesce(out_shape, strides_per_tensor)
    if len(sizes) > RMAX:
        raise Unfit(f"more than {RMAX} non-mergeable dims")
    dense = int(len(sizes) == 1 and all(s[0] == 1 for s in sts))
    pad = RMAX - len(sizes)
    words = [dense, *([1] * pad), *sizes]
    for s in sts:
        words += [0] * pad + s
    return [(1, w) for w in words]  # TAG_INT


class JitRun:
    """A generated kernel for one (op, signature) on one device."""

    tier = "jit"
    __slots__ = (
        "sch",
        "dev",
        "target",
        "handle",
        "plan",
        "scalar_dt",
        "fresh",
        "out_pos",
        "out_shape",
        "out_dtype",
        "out_strides",
        "name_c",
        "single",
        "launch_plan",
    )

    def __init__(self, sch, dev, target, handle, plan, scalar_dt, fresh, out_pos, out_shape, out_dtype, out_strides):
        self.sch = sch
        self.dev = dev
        self.target = target
        self.handle = handle
        self.plan = plan
        self.scalar_dt = scalar_dt
        self.fresh = fresh
        self.out_pos = out_pos
        self.out_shape = out_shape
        self.out_dtype = out_dtype
        self.out_strides = out_strides  # TensorIterator's layout where not row-major, else None
        self.name_c = ffi.new("char[]", sch.name.encode())
        self.launch_plan = None

    def run(self, args, kwargs, full):
        """Allocate (or take) the output and launch the generated kernel: the first call
        packs it in full and keeps the packed words as this run's launch plan, later calls
        patch the plan (_launch_planned)."""
        if self.launch_plan is not None:
            return self._launch_planned(full)
        dev, shape = self.dev, self.out_shape
        out = empty_on(dev, shape, self.out_dtype, self.out_strides) if self.fresh else full[self.out_pos]
        if out.numel() == 0:
            return out
        tensors = [(out, shape, out.stride())]
        scalars = []
        lang = self.target.lang
        sdt = self.scalar_dt
        for pos, kind, tag in self.plan:
            v = full[pos]
            if kind == IN_TENSOR:
                tensors.append((v, shape, expand_strides(v, shape)))
            else:
                if kind == IN_CPU0:
                    v = v.item()
                scalars.append(scalar_words(v, sdt[len(scalars)], tag, lang))
        if lang == "opencl-c":
            scalars += geometry_scalars(shape, [t[2] for t in tensors])
        starts: list[int] = []
        packed, floats = pack_call(1, tensors, scalars, starts)
        L.launch_packed(dev, self.handle, packed, floats, [], self.name_c, self.target.plugin, self.sch.name)
        self.launch_plan = LaunchPlan(self, packed, floats, tensors, starts)
        return out

    def _launch_planned(self, full):
        """run() after the first call. The router keys a run by its operands' shapes, dtypes
        and (unless contiguous) strides, so every geometry word of the packed call is fixed:
        only data pointers, offsets and run-time scalar values change between calls. This
        is the vendor tier's fast path (tiers/vendor.py `_specialize`) for generated kernels;
        packing the whole call each time cost 3-6 us of a 16-float op."""
        lp = self.launch_plan
        arr, farr = lp.arrays()
        dev = self.dev
        stream = current(dev)
        if self.fresh:
            out = wrap(allocate(dev, lp.out_nbytes, stream), self.out_shape, lp.out_strides, 0, self.out_dtype)
        else:
            out = full[self.out_pos]
        arr[lp.out_slot] = out._buf.ptr
        arr[lp.out_slot + 1] = out.storage_offset() * lp.out_itemsize
        for idx, pos, itemsize in lp.tensor_slots:
            t = full[pos]
            arr[idx] = t._buf.ptr
            arr[idx + 1] = t.storage_offset() * itemsize
        for idx, pos, kind, dt, tag in lp.scalar_slots:
            v = full[pos]
            if kind == IN_CPU0:
                v = v.item()
            word_tag, w = scalar_words(v, dt, tag, self.target.lang)
            if word_tag == TAG_FLOAT:
                farr[arr[idx + 1]] = w
            else:
                arr[idx + 1] = w
        status = lib.rt_launch(dev, stream, self.handle, arr, lp.n, farr, ffi.NULL, self.name_c)
        if status:
            raise_status(status, plugin=self.target.plugin, op=self.sch.name)
        return out


class LaunchPlan:
    """A JitRun's packed call from its first launch, with the word index of every value
    that changes between calls. Each thread patches its own copy of the arrays: autograd
    runs backward ops on its device thread with the forward's cached runs."""

    __slots__ = ("template", "floats", "n", "out_slot", "tensor_slots", "scalar_slots", "per_thread")
    __slots__ += ("out_nbytes", "out_strides", "out_itemsize")

    def __init__(self, run: JitRun, packed: list, floats: list, tensors: list, starts: list):
        """`starts`: where pack_call put each tensor's descriptor, then each scalar."""
        self.template, self.floats, self.n = packed, floats, len(packed)
        self.per_thread: dict = {}
        self.out_itemsize = run.out_dtype.itemsize
        self.out_strides = run.out_strides or contiguous_strides(run.out_shape)
        self.out_nbytes = self.out_itemsize
        for d in run.out_shape:
            self.out_nbytes *= d
        self.out_slot = starts[0]
        inputs = [(pos, kind, tag) for pos, kind, tag in run.plan if kind == IN_TENSOR]
        self.tensor_slots = [
            (starts[1 + k], pos, tensors[1 + k][0].dtype.itemsize) for k, (pos, _, _) in enumerate(inputs)
        ]
        scalar_starts = starts[len(tensors) :]  # run-time scalars first (OpenCL geometry after)
        self.scalar_slots = [
            (scalar_starts[k], pos, kind, run.scalar_dt[k], tag)
            for k, (pos, kind, tag) in enumerate(p for p in run.plan if p[1] != IN_TENSOR)
        ]

    def arrays(self):
        """(packed words, float pool) cffi arrays of the calling thread."""
        state = self.per_thread.get(get_ident())
        if state is None:
            if len(self.per_thread) >= 64:  # idents of finished threads: drop them all
                self.per_thread.clear()
            state = self.per_thread[get_ident()] = (
                ffi.new("int64_t[]", self.template),
                ffi.new("double[]", self.floats) if self.floats else ffi.NULL,
            )
        return state


def plan_operands(sch, full):
    """Classify each non-out argument: tensor input, run-time scalar, or baked constant."""
    items = []  # (pos, what, value) what: "tensor" | "scalar" | "cpu0" | "const" | "none"
    for pos in range(sch.n_args):
        if pos in sch.out_positions:
            continue
        kind = sch.kinds[pos]
        v = full[pos]
        if kind == TENSOR_LIST:
            raise Unfit("tensor list argument")
        if kind != NON_TENSOR:
            if v is None:
                items.append((pos, "none", None))
            elif type(v) is RalTensor:
                items.append((pos, "tensor", v))
            elif isinstance(v, torch.Tensor):
                items.append((pos, "cpu0", v))
            elif isinstance(v, (bool, int, float)):
                items.append((pos, "scalar", v))
            else:
                raise Unfit(f"argument {sch.names[pos]} of type {type(v).__name__}")
            continue
        ts = sch.type_strs[pos]
        if ts.startswith("Generator"):
            raise Unfit("random op")
        if ts in _RUNTIME_TYPES:
            if v is None:
                items.append((pos, "none", None))
            elif isinstance(v, (bool, int, float)):
                items.append((pos, "scalar", v))
            else:
                raise Unfit(f"argument {sch.names[pos]}={v!r}")
        else:
            items.append((pos, "const", v))
    return items


def build_pointwise(sch, args, kwargs, full, dev):
    """Plan, generate and compile a pointwise kernel for this call; None if the tier declines."""
    try:
        return _build(sch, args, kwargs, full, dev)
    except Unfit:
        return None


def _build(sch, args, kwargs, full, dev):
    tmpl = template_for(sch.func)
    target = target_of(dev)
    if tmpl is None or target is None:
        raise Unfit("no template or no compiler")
    if sch.is_view or sch.n_returns != 1:
        raise Unfit("view or multi-output op")
    fresh = not (sch.is_inplace or sch.is_out)
    try:
        res = meta_run(sch.func, args, kwargs, quiet=not fresh)
    except Exception:
        raise Unfit("meta run refused the call") from None  # the cpu tier raises the real error
    if not isinstance(res, torch.Tensor):
        raise Unfit("result is not one tensor")
    out_shape = tuple(res.shape)
    if fresh:
        out_pos = -1
        out_dtype = res.dtype
    else:
        out_pos = sch.out_positions[0] if sch.is_out else sch.mutated_positions[0]
        o = full[out_pos]
        if type(o) is not RalTensor or tuple(o.shape) != out_shape:
            raise Unfit("mutated argument not on the device or resized")
        out_dtype = o.dtype
    if len(out_shape) > RMAX and target.lang == "opencl-c":
        raise Unfit("rank")
    if len(out_shape) > lib.RAL_MAX_RANK:  # rt_launch refuses such a tensor descriptor
        raise Unfit("rank")
    items = plan_operands(sch, full)
    promo = [
        to_meta(v) if isinstance(v, torch.Tensor) and type(v) is RalTensor else v
        for pos, what, v in items
        if what in ("tensor", "cpu0", "scalar")
        and (sch.kinds[pos] != NON_TENSOR or sch.type_strs[pos] == "number")
        and sch.names[pos] not in NO_PROMOTE_ARGS
    ]
    promo = [
        torch.empty((), dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v
        for v in promo
    ]
    ct = compute_dtype(promo, torch.bool if tmpl.compares else out_dtype)
    if not fresh and not tmpl.compares and promo and compute_dtype(promo, torch.bool) != out_dtype:
        # ATen computes in the operands' dtype, then casts to the written tensor or raises
        # (int.add_(1.5)); the cpu tier does that
        raise Unfit("operands promote to another dtype than the tensor written")
    if not ct.is_floating_point and not tmpl.ints:
        raise Unfit("integer computation of a float-only template")
    spec = PointwiseSpec(outs=[out_dtype], single_op=True)
    leaves = []
    plan = []
    tag = "f" if ct.is_floating_point else "i"
    for pos, what, v in items:
        if what == "tensor":
            k = len(spec.ins)
            spec.ins.append(v.dtype)
            leaf = var(f"a{k}", v.dtype)
            leaves.append(leaf if sch.names[pos] in NO_PROMOTE_ARGS else cast(leaf, ct))
            plan.append((pos, IN_TENSOR, None))
        elif what in ("scalar", "cpu0"):
            j = len(spec.scalars)
            spec.scalars.append((ct, tag))
            leaves.append(var(f"s{j}", ct))
            plan.append((pos, IN_CPU0 if what == "cpu0" else IN_SCALAR, tag))
        else:
            leaves.append(v)
    e = tmpl.fn(Ctx(ct), *leaves)
    if e is None:
        raise Unfit("template declines these dtypes")
    spec.stores.append((0, e))
    check_dtypes(target, spec.dtypes | {ct})
    source, name = source_for(target, spec)
    handle = compile_kernel(target, source, name)
    if handle is None:
        raise Unfit("compile failed")
    return JitRun(
        sch,
        dev,
        target,
        handle,
        tuple(plan),
        [d for d, _ in spec.scalars],
        fresh,
        out_pos,
        out_shape,
        out_dtype,
        elementwise_strides(out_shape, [(v.shape, v.stride()) for _, what, v in items if what == "tensor"])
        if fresh
        else None,
    )
