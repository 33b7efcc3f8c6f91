"""The vendor tier: run a plugin kernel that the manifest declares for this call."""

from __future__ import annotations

import math
import warnings
from threading import get_ident

import torch

from torch_fl._native import ffi, lib
from torch_fl.core.dtype_names import ABSENT_CODE
from torch_fl.core.registry import REGISTRY
from torch_fl.core.runtime import check, raise_status
from torch_fl.device import rng
from torch_fl.device.dtypes import CODE_OF_TORCH
from torch_fl.device.memory import ALLOC_OBSERVERS, Buffer, allocate
from torch_fl.device.stream_state import current
from torch_fl.tensor.layout import contiguous_strides, permuted_dense_strides
from torch_fl.tensor.op_schema import BROADCASTING_OPS, NO_PROMOTE_ARGS, NON_TENSOR, TENSOR_LIST
from torch_fl.tensor.ral_tensor import RalTensor, torch_device, wrap
from torch_fl.tensor.transfer import to_device
from torch_fl.tiers.cpu import ROW_MAJOR_RESULTS
from torch_fl.tiers.launch import launch_packed
from torch_fl.tiers.output_specs import OUTPUT_SPECS, in_format, suggested_format, to_meta
from torch_fl.tiers.output_specs import adjust as adjust_output_specs
from torch_fl.tiers.packing import (
    TAG_BOOL,
    TAG_FLOAT,
    TAG_INT,
    TAG_INT_LIST,
    Unpackable,
    check_packable,
    pack_absent,
    pack_scalar,
    pack_tensor,
)
from torch_fl.tiers.protocol import Declined

_aten = torch.ops.aten

# Ops whose kernels take an absent descriptor for an output the op leaves undefined (the
# gradients output_mask does not ask for); other ops with such outputs decline.
ABSENT_OUTPUT_OPS = frozenset(
    {
        "aten::convolution_backward",
        "aten::native_batch_norm_backward",
        "aten::_thnn_fused_lstm_cell_backward_impl",
        "aten::_thnn_fused_gru_cell_backward",
    }
)
rt_launch = lib.rt_launch  # the fast path calls it directly (launch.py's launch, inlined)


def _expand_plan(in_shape, out_shape):
    """For each output dim, the input dim whose stride to use, or -1 for a broadcast (0) stride."""
    r, k = len(out_shape), len(in_shape)
    plan = []
    for j in range(r):
        src = j - (r - k)
        if src < 0 or (in_shape[src] == 1 and out_shape[j] != 1):
            plan.append(-1)
        else:
            plan.append(src)
    return tuple(plan)


def meta_run(func, args, kwargs, quiet: bool = False):
    """Run func on meta stand-ins of the ral tensors: output shapes/dtypes without compute.
    `quiet`: a tier's probe of an out= or in-place call, whose meta kernel warns of the resize
    the tier then declines; the kernel that runs the call gives that warning once."""
    meta_args = [to_meta(a) for a in args]
    meta_kwargs = {k: to_meta(v) for k, v in kwargs.items()}
    if not quiet:
        return func(*meta_args, **meta_kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return func(*meta_args, **meta_kwargs)


class FastPlan:
    """The packed call of a VendorRun with every constant baked in.

    Within one cached signature the packed layout never changes (shapes, dtypes, ranks,
    contiguity and scalar types are all part of the key); only pointers, offsets and
    scalar values do. So the array is built once and patched per call: no list building,
    no per-call ffi.new on the thread that compiled it.
    """

    __slots__ = (
        "template",
        "floats",
        "out_slots",
        "tensor_slots",
        "int_slots",
        "float_slots",
        "gen_slot",
        "strings_c",
        "keep",
        "owner",
        "arr",
        "farr",
        "n",
        "out_sigs",
        "outs",
        "prep_slots",
        "gen_pos",
    )

    def __init__(self, template, floats, out_slots, tensor_slots, int_slots, float_slots, gen_slot, strings, out_sigs):
        self.template = template
        self.floats = floats
        self.out_slots = out_slots
        self.tensor_slots = tensor_slots
        self.int_slots = int_slots
        self.float_slots = float_slots
        self.gen_slot = gen_slot
        self.keep = [ffi.new("char[]", s.encode()) for s in strings]
        self.strings_c = ffi.new("char*[]", self.keep) if strings else ffi.NULL
        self.owner = get_ident()
        self.arr = ffi.new("int64_t[]", template)
        self.farr = ffi.new("double[]", floats) if floats else ffi.NULL
        self.n = len(template)
        self.out_sigs = out_sigs
        self.outs = ()  # (slot, shape, strides, dtype, nbytes, sig) per fresh output: set by _compile_fast
        self.prep_slots = ()  # (slot, argument position, prep) per scalar operand


def _compile_fast(run, full):
    """A FastPlan for this call's signature, or None if some argument needs per-call work."""
    sch = run.sch
    packed = [run.n_out, 0, len(run.scalars)]
    tensor_slots = []
    out_slots = []

    def add(shape, stride, dtype):
        idx = len(packed)
        packed.extend((0, 0, CODE_OF_TORCH[dtype], len(shape), *shape, *stride))
        return idx

    if run.fresh:
        out_slots = [add(shape, stride, dtype) for shape, stride, dtype, _ in run.out_specs]
    else:
        for p in run.out_pos:
            t = full[p]
            if not t.is_contiguous():
                return None
            tensor_slots.append((add(t.shape, contiguous_strides(t.shape), t.dtype), p, -1, t.dtype.itemsize))
    n_in = 0
    prep_slots = []
    for pos, kind, prep, expand in run.inputs:
        v = full[pos]
        if prep is not None:
            # A scalar operand (a Python number or a CPU 0-dim tensor) becomes a 0-dim device
            # tensor of a dtype fixed by the signature: its slot is constant but for the
            # pointer, which the prep (the scalar cache) gives per call. Other preps copy or
            # cast whole tensors and keep the general path.
            if kind == TENSOR_LIST or (isinstance(v, torch.Tensor) and (type(v) is RalTensor or v.dim() != 0)):
                return None
            made = prep(v)
            if made.dim() != 0:
                return None
            n_in += 1
            shape = () if expand is None else expand[0]
            idx = add(shape, (0,) * len(shape), made.dtype)
            prep_slots.append((idx, pos, prep))
            continue
        items = list(enumerate(v)) if kind == TENSOR_LIST else [(-1, v)]
        for j, t in items:
            n_in += 1
            if t is None:
                packed.extend((0, 0, ABSENT_CODE, 0))
                continue
            if type(t) is not RalTensor:
                return None
            # A contiguous operand's key says only "contiguous" (strides of size-1 dims may
            # differ between calls and do not matter); a strided one's key holds its strides
            # (dispatch/entry.py signature), so they are constant within the plan.
            cst = contiguous_strides(t.shape) if t.is_contiguous() else t.stride()
            if expand is None:
                idx = add(t.shape, cst, t.dtype)
            else:
                out_shape, plan = expand
                idx = add(out_shape, [0 if p < 0 else cst[p] for p in plan], t.dtype)
            tensor_slots.append((idx, pos, j, t.dtype.itemsize))
    packed[1] = n_in
    int_slots, float_slots, floats, strings = [], [], [], []
    gen_slot, gen_pos = -1, -1
    for pos, kind in run.scalars:
        v = full[pos]
        if kind == 1:
            packed.extend((TAG_INT, len(v)))
        elif kind == 2:
            packed.extend((TAG_INT_LIST, 2, 0, 0))
            gen_slot, gen_pos = len(packed) - 2, pos
        elif sch.value_free[pos] and v is not None:
            tv = type(v)
            if tv is bool or tv is int:
                packed.extend((TAG_BOOL if tv is bool else TAG_INT, 0))
                int_slots.append((len(packed) - 1, pos))
            elif tv is float:
                packed.extend((TAG_FLOAT, len(floats)))
                float_slots.append((len(floats), pos))
                floats.append(0.0)
            else:
                return None
        else:
            pack_scalar(v, packed, floats, strings)  # part of the key: constant
    # An output's signature as dispatch/entry.py computes it: True for contiguous, else strides.
    out_sigs = (
        [
            (run.dev, shape, dtype, True if stride == contiguous_strides(shape) else stride)
            for shape, stride, dtype, _ in run.out_specs
        ]
        if run.fresh
        else []
    )
    plan = FastPlan(packed, floats, out_slots, tensor_slots, int_slots, float_slots, gen_slot, strings, out_sigs)
    plan.prep_slots = tuple(prep_slots)
    plan.gen_pos = gen_pos  # where the op's generator= argument is (its state is drawn per call)
    if run.fresh:
        plan.outs = tuple((i, *spec, sig) for i, spec, sig in zip(out_slots, run.out_specs, out_sigs))
    return plan


class VendorRun:
    """A cached plan for one (op, signature) on one device: allocate, pack, launch."""

    tier = "vendor"
    __slots__ = (
        "sch",
        "dev",
        "handle",
        "name_c",
        "fresh",
        "out_specs",
        "out_pos",
        "inputs",
        "scalars",
        "n_out",
        "numel",
        "plugin",
        "kernel",
        "single",
        "fast",
        "fast_call",
    )

    def __init__(self, sch, dev, entry, handle, fresh, out_specs, out_pos, inputs, scalars, numel, plugin):
        self.sch = sch
        self.dev = dev
        self.handle = handle
        self.name_c = ffi.new("char[]", sch.name.encode())
        self.fresh = fresh
        self.out_specs = out_specs
        self.out_pos = out_pos
        self.inputs = inputs
        self.scalars = scalars
        self.n_out = len(out_specs) if fresh else len(out_pos)
        self.numel = numel
        self.plugin = plugin
        self.kernel = entry.kernel
        self.single = sch.n_returns == 1
        self.fast = None
        self.fast_call = self.run  # the plan's straight-line function once built (_specialize)

    def run(self, args, kwargs, full):
        """Execute the kernel for this call."""
        fast = self.fast
        if fast is not None:
            return self._run_fast(fast, full)
        return self._run_packed(full)

    def _run_fast(self, fast, full):
        dev = self.dev
        stream = current(dev)
        if fast.owner == get_ident():
            arr, farr = fast.arr, fast.farr
        else:
            arr = ffi.new("int64_t[]", fast.template)
            farr = ffi.new("double[]", fast.floats) if fast.floats else ffi.NULL
        if self.fresh:
            outs = []
            for idx, shape, stride, dtype, nb, sig in fast.outs:
                buf = allocate(dev, nb, stream)
                arr[idx] = buf.ptr
                outs.append(wrap(buf, shape, stride, 0, dtype, sig))
        else:
            outs = [full[i] for i in self.out_pos]
        for idx, pos, j, isz in fast.tensor_slots:
            t = full[pos] if j < 0 else full[pos][j]
            arr[idx] = t._buf.ptr
            arr[idx + 1] = t.storage_offset() * isz
        keep = [prep(full[pos]) for _, pos, prep in fast.prep_slots] if fast.prep_slots else ()
        for (idx, _, _), t in zip(fast.prep_slots, keep):
            arr[idx] = t._buf.ptr
            arr[idx + 1] = t.storage_offset() * t.dtype.itemsize
        for idx, pos in fast.int_slots:
            arr[idx] = full[pos]
        for fi, pos in fast.float_slots:
            farr[fi] = full[pos]
        if fast.gen_slot >= 0:
            arr[fast.gen_slot], arr[fast.gen_slot + 1] = rng.next_philox(dev, self.numel, full[fast.gen_pos])
        status = rt_launch(dev, stream, self.handle, arr, fast.n, farr, fast.strings_c, self.name_c)
        if status:
            raise_status(status, plugin=self.plugin, op=self.sch.name)
        return outs[0] if self.single else tuple(outs)

    def _run_packed(self, full):
        dev = self.dev
        stream = current(dev)
        if self.fresh:
            outs = [
                None if spec is None else wrap(allocate(dev, spec[3], stream), spec[0], spec[1], 0, spec[2])
                for spec in self.out_specs
            ]
        else:
            outs = [full[i] for i in self.out_pos]
        packed = [self.n_out, 0, len(self.scalars)]
        for o in outs:
            if o is None:
                pack_absent(packed)
            else:
                pack_tensor(packed, o)
        keep = []
        n_in = 0
        for pos, kind, prep, expand in self.inputs:
            v = full[pos]
            if kind == TENSOR_LIST:
                for t in v:
                    if prep is not None:
                        t = prep(t)
                        keep.append(t)
                    pack_tensor(packed, t)
                n_in += len(v)
                continue
            n_in += 1
            if v is None:
                pack_absent(packed)
                continue
            if prep is not None:
                v = prep(v)
                keep.append(v)
            if expand is None:
                pack_tensor(packed, v)
            else:
                out_shape, plan = expand
                st = v.stride()
                pack_tensor(packed, v, out_shape, [0 if p < 0 else st[p] for p in plan])
        packed[1] = n_in
        floats = []
        strings = []
        for pos, kind in self.scalars:
            if kind == 0:
                pack_scalar(full[pos], packed, floats, strings)
            elif kind == 1:  # Tensor[] length
                packed.append(TAG_INT)
                packed.append(len(full[pos]))
            else:  # Generator -> Philox [seed, offset]
                packed.extend((TAG_INT_LIST, 2, *rng.next_philox(dev, self.numel, full[pos])))
        launch_packed(dev, self.handle, packed, floats, strings, self.name_c, self.plugin, self.sch.name)
        return outs[0] if self.single else tuple(outs)


def _first_tensor(sch, full):
    """The operand whose dtype a manifest entry names: the first data tensor, passing over a
    condition or mask (where's condition is bool whatever its values' dtype: float64 values
    went through a float-only kernel on ral:1), which counts only when no other tensor does."""
    fallback = None
    for pos in sch.input_positions:
        v = full[pos]
        if sch.kinds[pos] == TENSOR_LIST:
            v = v[0] if v else None
        if not isinstance(v, torch.Tensor):  # a Tensor-typed slot may hold a Python number (rsub)
            continue
        if sch.names[pos] not in NO_PROMOTE_ARGS:
            return v
        if fallback is None:
            fallback = v
    return fallback


def _meta_layouts(out_specs, metas):
    """out_specs with each output laid out as PyTorch's meta kernel lays it out where that is
    dense (a pointwise op on transposed inputs, attention's [B, L, H, E] result): CPU gives
    those strides, and a compiled graph, whose fake tensors ran the meta kernel, views by them."""
    fixed = []
    for (shape, stride, dtype, nbytes), m in zip(out_specs, metas):
        fixed.append((shape, permuted_dense_strides(m) or stride, dtype, nbytes))
    return fixed


class RelayoutRun:
    """A row-major kernel's results copied into the layout CPU gives them.

    CPU (and CUDA) return batch norm of a channels_last input channels_last, and torch.compile's
    fake tensors say so too, but a kernel declaring requires_contiguous writes row-major only:
    so the kernel runs on row-major operands as before and each such output is copied once
    into CPU's layout (output_specs.SUGGESTED_FORMAT_OUTPUTS). Meta kernels are no guide here:
    for a permuted input they keep its strides where CPU's batch norm and softmax/layer norm
    backward return row-major. The plan is cached per signature (a channels_last input's
    strides are in the key), so row-major calls never meet this wrapper."""

    tier = "vendor"
    __slots__ = ("inner", "fmt", "outputs", "fast_call")

    def __init__(self, inner, fmt, outputs):
        self.inner = inner
        self.fmt, self.outputs = fmt, outputs
        self.fast_call = self.run

    def run(self, args, kwargs, full):
        """Run the kernel, then copy the listed outputs into CPU's memory format."""
        return in_format(self.inner.fast_call(args, kwargs, full), self.fmt, self.outputs)


def _pick_entry(entries, dtype, rank, numel):
    code = CODE_OF_TORCH.get(dtype)
    reasons = []
    for e in entries:
        if code not in e.dtype_codes:
            reasons.append(f"dtype {str(dtype).replace('torch.', '')} not in manifest")
        elif not e.min_rank <= rank <= e.max_rank:
            reasons.append(f"rank {rank} outside [{e.min_rank}, {e.max_rank}]")
        elif e.max_numel is not None and numel > e.max_numel:
            reasons.append(f"numel {numel} > max_numel {e.max_numel}")
        else:
            return e
    raise Declined("; ".join(reasons))


def _has_complex_operand(sch, full) -> bool:
    for p in sch.input_positions:
        v = full[p]
        items = v if isinstance(v, (list, tuple)) else (v,)
        if any(isinstance(t, torch.Tensor) and t.is_complex() for t in items):
            return True
    return False


# Scalar arguments that never join type promotion (add's alpha, masked_fill's value).
_UNPROMOTED_NUMBERS = frozenset({"alpha", "value"})


def _number_positions(sch) -> tuple:
    """Positions of an op's `Scalar` (number) operands: those that join type promotion
    (optional ones too: clamp's bounds, so `int_tensor.clamp_(max=1.5)` is refused as on CPU)."""
    return tuple(
        p
        for p, (kind, type_str) in enumerate(zip(sch.kinds, sch.type_strs))
        if kind == NON_TENSOR
        and type_str in ("number", "Optional[number]")
        and sch.names[p] not in NO_PROMOTE_ARGS
        and sch.names[p] not in _UNPROMOTED_NUMBERS
    )


def _operands(sch, full, numbers: bool) -> list:
    """An op's promoting operands (tensors and wrapped numbers; its Scalars when `numbers`)."""
    out = [full[p] for p in sch.input_positions if full[p] is not None and sch.names[p] not in NO_PROMOTE_ARGS]
    if numbers:
        out += [full[p] for p in _number_positions(sch) if full[p] is not None]
    return out


def common_dtype(operands):
    """ATen's result type of pointwise operands (DEFAULT promotion)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, result = elementwise_dtypes(
        *[to_meta(v) for v in operands], type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
    )
    return result


def _promotion_target(sch, full, out_dtype):
    """The dtype pointwise inputs must share before a kernel sees them (None: no casts)."""
    # A comparison's Scalar operand is passed as a kernel scalar, which the kernel converts
    # to the tensor's dtype: `int_tensor < 0.5` compared with 0. ATen compares in the
    # promoted dtype (float), so the Scalar joins the promotion.
    operands = _operands(sch, full, numbers=out_dtype == torch.bool)
    dtypes = {v.dtype for v in operands if isinstance(v, torch.Tensor)}
    numbers = any(not isinstance(v, torch.Tensor) for v in operands)
    if out_dtype is not None and out_dtype != torch.bool:
        return None if (dtypes <= {out_dtype} and not numbers) else out_dtype
    if len(dtypes) <= 1 and not numbers:
        return None
    return common_dtype(operands)


def _check_written_dtype(sch, full, out_dtype) -> None:
    """Decline an in-place or out= pointwise call whose operands promote to another dtype
    than the tensor it writes: ATen computes in the operands' dtype and casts the result
    (uint8 5 - 8 into a float64 out= is 253.0), or raises where that cast is not allowed
    (int.add_(1.5)); a vendor kernel computes in the written dtype."""
    operands = _operands(sch, full, numbers=True)
    if not any(isinstance(v, torch.Tensor) for v in operands):
        return
    common = common_dtype(operands)
    if common != out_dtype:
        raise Declined(f"computes in {common} and writes {out_dtype}")


# (device, stream, target dtype, source type or dtype, value, sign) -> 0-dim device tensor.
# Scalar operands (`x * 0.5`, a CPU 0-dim tensor from `torch.where(m, x, -1e9)`) were
# uploaded afresh on every call: an allocation, a host fill and a copy on the calling
# thread, more than the op's own dispatch. They repeat (a model's constants), so the
# uploaded tensor is kept. These tensors are only ever read by kernels (an operand that a
# kernel writes is never a scalar upload), they are torch_fl's own (no user tensor is
# held), and the stream is part of the key, so a kernel only reads a value uploaded in
# order on its own stream.
_SCALARS: dict = {}
_SCALARS_MAX = 512


def _scalar_key(dev, dtype, src, v):
    tv = type(v)
    if tv is float:
        return (dev, current(dev), dtype, src, v, math.copysign(1.0, v))  # -0.0 is not 0.0
    if tv is int or tv is bool:
        return (dev, current(dev), dtype, src, tv, v)
    return None  # complex and others: not cached


def _host_number(shape, v, dtype):
    """Python number v filled as dtype, converted as ATen converts a wrapped number: an int
    wraps into a narrower integer dtype (uint8 + 1000 adds 232) where torch.full raises."""
    if type(v) is int and not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
        return torch.full(shape, v, dtype=torch.int64).to(dtype)
    return torch.full(shape, v, dtype=dtype)


def _device_scalar(v, dtype, dev, src):
    """A 0-dim tensor on ral:dev holding Python number v as dtype (cached)."""
    key = _scalar_key(dev, dtype, src, v)
    if key is not None and v == v:  # NaN never equals its key; do not fill the cache with them
        hit = _SCALARS.get(key)
        if hit is not None:
            return hit
    host = torch.full((), v, dtype=src) if isinstance(src, torch.dtype) else _host_number((), v, dtype)
    out = to_device(host, dev, dtype)
    if key is not None and v == v:
        if len(_SCALARS) >= _SCALARS_MAX:
            _SCALARS.clear()
        _SCALARS[key] = out
    return out


def _number_prep(dtype, dev, shape=()):
    if shape == ():

        def prep_scalar(v):
            return _device_scalar(v, dtype, dev, type(v))

        return prep_scalar

    def prep(v):
        return to_device(_host_number(shape, v, dtype), dev)

    return prep


def _cpu_scalar_upload(t, dev, dtype):
    """Upload a CPU tensor; a 0-dim one through the scalar cache."""
    if t.dim() == 0 and not t.dtype.is_complex and not dtype.is_complex:
        return _device_scalar(t.item(), dtype, dev, t.dtype)
    return to_device(t, dev, dtype)


def _cast_prep(dtype, dev):
    def prep(t):
        if type(t) is not RalTensor:
            return _cpu_scalar_upload(t, dev, dtype)
        return _aten._to_copy.default(t, dtype=dtype)

    return prep


def _upload_prep(dev):
    def prep(t):
        return _cpu_scalar_upload(t, dev, t.dtype)

    return prep


def _contig_prep(inner):
    def prep(t):
        if inner is not None:
            t = inner(t)
        if not t.is_contiguous():
            t = _aten.clone.default(t, memory_format=torch.contiguous_format)
        return t

    return prep


def build(sch, args, kwargs, full, dev):
    """Plan a vendor-tier run for this call, or raise Declined with the reason."""
    entries = REGISTRY.entries(dev, sch.name)
    if not entries:
        raise Declined("no manifest entry")
    if not (sch.returns_tensor or sch.is_inplace or sch.is_out):
        raise Declined("op returns non-tensor values")
    if sch.is_view:
        raise Declined("view op")
    fresh = not (sch.is_inplace or sch.is_out)
    if fresh:
        spec = OUTPUT_SPECS.get(sch.name)
        try:
            res = spec(full) if spec is not None else meta_run(sch.func, args, kwargs)
        except (NotImplementedError, AttributeError) as e:
            # no meta kernel, or a broken one: another tier serves the call
            raise Declined(f"meta kernel fails: {type(e).__name__}") from e
        metas = res if isinstance(res, (list, tuple)) else (res,)
        if any(m is None for m in metas) and sch.name not in ABSENT_OUTPUT_OPS:
            # e.g. native_layer_norm_backward without weight grads
            raise Declined("op returns undefined (None) outputs")
        out_specs = []
        for m in metas:
            if m is None:
                out_specs.append(None)  # packed absent, returned as None (_run_packed)
                continue
            shape = tuple(m.shape)
            out_specs.append((shape, contiguous_strides(shape), m.dtype, m.numel() * m.dtype.itemsize))
        out_pos = ()
        adjust_output_specs(sch.name, out_specs, full)
        present = [sp for sp in out_specs if sp is not None]
        out_shape = present[0][0] if present else ()
        out_dtype = present[0][2] if present else None
        numel = max((m.numel() for m in metas if m is not None), default=0)
    else:
        out_pos = tuple(a for a in sch.return_alias)
        if any(p < 0 for p in out_pos):
            raise Declined("mixed fresh and aliased returns")
        for p in out_pos:
            if type(full[p]) is not RalTensor:
                raise Declined("mutated argument is not on the device")
        if sch.is_out:
            res = meta_run(sch.func, args, kwargs, quiet=True)  # checks shapes; refuses silent resizes
            metas = res if isinstance(res, (list, tuple)) else (res,)
            for p, m in zip(out_pos, metas):
                if tuple(full[p].shape) != tuple(m.shape):
                    raise Declined("out= tensor needs a resize")
        out_specs = ()
        out_shape = tuple(full[out_pos[0]].shape)
        out_dtype = full[out_pos[0]].dtype
        numel = full[out_pos[0]].numel()
    first = _first_tensor(sch, full)
    probe = first if first is not None else (full[out_pos[0]] if out_pos else None)
    dtype = probe.dtype if probe is not None else out_dtype
    rank = probe.dim() if probe is not None else len(out_shape)
    if sch.pointwise and not fresh and out_dtype is not None:
        _check_written_dtype(sch, full, out_dtype)
    target = _promotion_target(sch, full, out_dtype) if sch.pointwise else None
    # The kernel sees the promoted dtype (real * complex runs a complex kernel), so that is
    # the dtype the manifest entry must declare; a complex operand the kernel would not see
    # as complex (a non-pointwise op taking the first operand's dtype) is declined.
    kernel_dtype = target or dtype
    entry = _pick_entry(entries, kernel_dtype, rank, numel)
    if kernel_dtype is not None and not kernel_dtype.is_complex and _has_complex_operand(sch, full):
        raise Declined("complex operand of a real kernel")
    if sch.name == "aten::copy_" and CODE_OF_TORCH.get(full[1].dtype) not in entry.dtype_codes:
        # A cast kernel must know the source dtype too (bfloat16 -> float32 on a device
        # without bfloat16 read garbage).
        raise Declined(f"source dtype {str(full[1].dtype).replace('torch.', '')} not in manifest")
    handle = REGISTRY.handle(dev, entry)
    if handle is None:
        raise Declined(f"kernel {entry.kernel} not resolvable")
    relayout = None
    if fresh and sch.name not in ROW_MAJOR_RESULTS:
        if not entry.requires_contiguous:
            out_specs = _meta_layouts(out_specs, metas)
        else:
            relayout = suggested_format(sch.name, full)
    broadcasting = (sch.pointwise or sch.name in BROADCASTING_OPS) and not entry.broadcast
    inputs = []
    for pos in sch.input_positions:
        kind = sch.kinds[pos]
        v = full[pos]
        prep = None
        expand = None
        if kind == TENSOR_LIST:
            if any(type(t) is not RalTensor for t in v):
                raise Declined("tensor list with non-device tensors")
            if entry.requires_contiguous and any(not t.is_contiguous() for t in v):
                prep = _contig_prep(None)
            inputs.append((pos, kind, prep, None))
            continue
        if v is None:
            inputs.append((pos, kind, None, None))
            continue
        if not isinstance(v, torch.Tensor):  # a wrapped Python number
            if broadcasting and entry.requires_contiguous:
                inputs.append((pos, kind, _number_prep(target or out_dtype, dev, out_shape), None))
            else:
                expand = (out_shape, (-1,) * len(out_shape)) if broadcasting else None
                inputs.append((pos, kind, _number_prep(target or out_dtype, dev), expand))
            continue
        if type(v) is not RalTensor:
            prep = _upload_prep(dev)  # a 0-dim CPU scalar tensor
        if target is not None and v.dtype != target and sch.names[pos] not in NO_PROMOTE_ARGS:
            prep = _cast_prep(target, dev)
        shape = tuple(v.shape)
        if broadcasting and shape != out_shape:
            plan = _expand_plan(shape, out_shape)
            if entry.requires_contiguous:
                base_prep = prep

                def prep(t, base_prep=base_prep, out_shape=out_shape):
                    if base_prep is not None:
                        t = base_prep(t)
                    return _aten.clone.default(
                        _aten.expand.default(t, list(out_shape)), memory_format=torch.contiguous_format
                    )
            else:
                expand = (out_shape, plan)
        elif entry.requires_contiguous and (type(v) is not RalTensor or not v.is_contiguous()):
            prep = _contig_prep(prep)
        inputs.append((pos, kind, prep, expand))
    if entry.requires_contiguous and not fresh and any(not full[p].is_contiguous() for p in out_pos):
        raise Declined("kernel requires contiguous outputs and a mutated argument is strided")
    scalars = []
    for pos, kind in enumerate(sch.kinds):
        if kind == NON_TENSOR:
            if "Generator" in sch.type_strs[pos]:
                scalars.append((pos, 2))
            else:
                try:
                    check_packable(full[pos])
                except Unpackable as exc:
                    raise Declined(str(exc)) from None
                scalars.append((pos, 0))
        elif kind == TENSOR_LIST:
            scalars.append((pos, 1))
    plugin = REGISTRY.plugin_of(dev).record.name
    run = VendorRun(sch, dev, entry, handle, fresh, out_specs, out_pos, inputs, scalars, numel, plugin)
    if _all_outputs_empty(run, full):
        return EmptyRun(run)
    run.fast = None if None in out_specs else _compile_fast(run, full)
    if run.fast is not None:
        run.fast_call = _specialize(run, run.fast)
    return run if relayout is None else RelayoutRun(run, *relayout)


_SPECIALIZED = 0  # how many plans got a straight-line function (tests read it)
# generated source -> its compiled code object (_specialize); bounded like the fast cache
_CODE: dict = {}
_CODE_MAX = 4096


def _specialize(run, fast):
    """A straight-line Python function doing exactly this plan's per-call work.

    `_run_fast` walks the plan's slot tables with loops and attribute lookups on every
    call: ~2-3 us of a 16-float add. Here every slot index is baked into generated source,
    so a call is a handful of stores and one rt_launch. Sizes that change with the shapes
    (output bytes, element counts) are the function's globals, not literals: plans that differ
    only in shapes share one compiled code object (_CODE), since compiling costs ~100 us and
    a growing KV cache makes a new plan every decoded token. Each thread patches its own copy
    of the packed arrays (autograd runs backward ops on its device thread, and the forward's
    plans are shared with it).
    """
    global _SPECIALIZED
    template, floats = fast.template, fast.floats

    def thread_state():
        # (packed array, float array, rt_malloc result cell) of the calling thread
        if len(per_thread) >= 64:  # idents of finished threads: drop them all
            per_thread.clear()
        state = per_thread[get_ident()] = (
            ffi.new("int64_t[]", template),
            ffi.new("double[]", floats) if floats else ffi.NULL,
            ffi.new("uint64_t*"),
        )
        return state

    per_thread = {fast.owner: (fast.arr, fast.farr, ffi.new("uint64_t*"))}
    env = {
        "_ident": get_ident,
        "_per_thread": per_thread,
        "_thread_state": thread_state,
        "_current": current,
        "_launch": rt_launch,
        "_handle": run.handle,
        "_strings": fast.strings_c,
        "_name": run.name_c,
        "_raise": raise_status,
        "_plugin": run.plugin,
        "_op": run.sch.name,
        "_malloc": lib.rt_malloc,
        "_check": check,
        "_Buffer": Buffer,
        "_aobs": ALLOC_OBSERVERS,
        "_make": torch.Tensor._make_wrapper_subclass,
        "_Ral": RalTensor,
        "_strided": torch.strided,
        "_device": torch_device(run.dev),
    }
    dev = int(run.dev)
    lines = [
        "def call(args, kwargs, full):",
        "    state = _per_thread.get(_ident())",
        "    if state is None:",
        "        state = _thread_state()",
        "    arr, farr, cell = state",
        f"    stream = _current({dev})",
    ]
    outs = []
    if run.fresh:
        # memory.allocate and ral_tensor.wrap, inlined (a forked child never gets here:
        # its dispatcher refuses every op before routing).
        for k, (idx, shape, stride, dtype, nb, sig) in enumerate(fast.outs):
            env[f"_s{k}"], env[f"_st{k}"], env[f"_d{k}"], env[f"_g{k}"] = shape, stride, dtype, sig
            env[f"_nb{k}"] = int(nb)
            lines += [
                f"    status = _malloc({dev}, _nb{k}, stream, cell)",
                "    if status:",
                "        _check(status)",
                f"    b{k} = _Buffer({dev}, cell[0], _nb{k})",
                "    if _aobs:",
                "        for obs in _aobs:",
                f"            obs('alloc', b{k})",
                f"    arr[{idx}] = b{k}.ptr",
            ]
            outs.append(k)
    else:
        outs = [f"full[{int(p)}]" for p in run.out_pos]
    for idx, pos, j, isz in fast.tensor_slots:
        ref = f"full[{int(pos)}]" if j < 0 else f"full[{int(pos)}][{int(j)}]"
        lines.append(f"    t = {ref}")
        lines.append(f"    arr[{idx}] = t._buf.ptr")
        lines.append(f"    arr[{idx + 1}] = t.storage_offset() * {int(isz)}")
    for k, (idx, pos, prep) in enumerate(fast.prep_slots):
        # a scalar operand: its cached 0-dim device tensor, kept alive until the launch
        env[f"_prep{k}"] = prep
        lines.append(f"    k{k} = _prep{k}(full[{int(pos)}])")
        lines.append(f"    arr[{idx}] = k{k}._buf.ptr")
        lines.append(f"    arr[{idx + 1}] = k{k}.storage_offset() * k{k}.dtype.itemsize")
    for idx, pos in fast.int_slots:
        lines.append(f"    arr[{idx}] = full[{int(pos)}]")
    if fast.gen_slot >= 0:
        env["_philox"] = rng.next_philox
        g = fast.gen_slot
        env["_numel"] = int(run.numel)
        lines.append(f"    arr[{g}], arr[{g + 1}] = _philox({dev}, _numel, full[{int(fast.gen_pos)}])")
    for fi, pos in fast.float_slots:
        lines.append(f"    farr[{fi}] = full[{int(pos)}]")
    if run.fresh:  # wrap before the launch, as _run_fast does: a failed launch frees them
        for k in outs:
            lines += [
                f"    r{k} = _make(_Ral, _s{k}, _st{k}, 0, None, _d{k}, _strided, _device)",
                f"    r{k}._buf = b{k}",
                f"    r{k}._dev = {dev}",
                f"    r{k}._sig = _g{k}",
            ]
        outs = [f"r{k}" for k in outs]
    lines.append(f"    status = _launch({dev}, stream, _handle, arr, {fast.n}, farr, _strings, _name)")
    lines.append("    if status:")
    lines.append("        _raise(status, plugin=_plugin, op=_op)")
    if run.single:
        lines.append(f"    return {outs[0]}")
    else:
        lines.append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    source = "\n".join(lines)
    code = _CODE.get(source)
    if code is None:
        if len(_CODE) >= _CODE_MAX:
            _CODE.clear()
        code = _CODE[source] = compile(source, f"<vendor plan {run.sch.name}>", "exec")
    exec(code, env)  # noqa: S102
    _SPECIALIZED += 1
    return env["call"]


def _all_outputs_empty(run, full) -> bool:
    if run.fresh:
        return bool(run.out_specs) and all(sp is None or sp[3] == 0 for sp in run.out_specs)
    return all(full[p].numel() == 0 for p in run.out_pos)


class EmptyRun:
    """Every output has zero elements: nothing to compute, so no kernel is launched (kernels
    need not handle degenerate layouts of empty tensors)."""

    tier = "vendor"
    __slots__ = ("inner",)

    def __init__(self, inner):
        self.inner = inner

    def run(self, args, kwargs, full):
        """Allocate the (empty) outputs, or return the (empty) mutated arguments."""
        r = self.inner
        if not r.fresh:
            outs = [full[i] for i in r.out_pos]
        else:
            outs = [
                None if sp is None else wrap(allocate(r.dev, 0, current(r.dev)), sp[0], sp[1], 0, sp[2])
                for sp in r.out_specs
            ]
        return outs[0] if r.single else tuple(outs)
