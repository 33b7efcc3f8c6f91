"""The cpu tier: run PyTorch's own CPU kernel on host copies (zero-copy where mappable)."""

from __future__ import annotations

import torch

from torch_fl._native import ffi
from torch_fl.core.errors import kind_refused
from torch_fl.device import rng
from torch_fl.device.sync import synchronize
from torch_fl.tensor.host_copy import (
    cpu_copy_for_fallback,
    host_address,
    host_copy_of,
    host_mappable,
    host_view,
    write_back,
)
from torch_fl.tensor.layout import extent_elems, is_dense
from torch_fl.tensor.op_schema import SECRETLY_MUTATED
from torch_fl.tensor.ral_tensor import RalTensor
from torch_fl.tensor.restride import resize, restride
from torch_fl.tensor.transfer import empty_on, to_device
from torch_fl.tiers.widen import WIDENED

# PyTorch's error when a kernel resizes a tensor whose storage it does not own (our host views)
_RESIZE_REFUSED = "Trying to resize storage that is not resizable"


# Ops whose result layout PyTorch decides per device backend rather than from the inputs:
# convolutions take the layout of their backend (ATen `_determine_backend_memory_format`),
# which for a PrivateUse1 device (ConvBackend::Overrideable) is always row-major; CPU's
# mkldnn backend keeps channels_last. torch.compile's fake tensors follow that rule for
# ral tensors, and inductor asserts a fallback kernel's strides against them, so these
# results are uploaded row-major (a ral conv returns what PyTorch says a ral conv returns).
ROW_MAJOR_RESULTS = frozenset(
    {
        "aten::convolution",
        "aten::_convolution",
        "aten::_convolution.deprecated",
        "aten::convolution_backward",
        "aten::convolution_overrideable",
        "aten::convolution_backward_overrideable",
    }
)


class CpuRun:
    """Run the op on CPU views of the device tensors and bring the results back."""

    tier = "cpu"
    __slots__ = ("sch", "dev", "fn", "keep_layout", "generators", "out_fn")

    def __init__(self, sch, dev):
        self.sch = sch
        self.dev = dev
        # the CPU kernel, or an exact replacement where CPU lacks a dtype CUDA has (widen.py)
        self.fn = WIDENED.get(sch.func, sch.func)
        self.keep_layout = sch.name not in ROW_MAJOR_RESULTS  # upload results as CPU laid them out
        self.generators = tuple(p for p, ts in enumerate(sch.type_strs) if "Generator" in ts)
        self.out_fn = _OUT_OVERLOADS.get(sch.func, _NO_OUT)
        if self.out_fn is _NO_OUT:
            self.out_fn = _OUT_OVERLOADS[sch.func] = _out_overload(sch)

    def run(self, args, kwargs, full):
        """Execute the op through PyTorch's CPU kernel."""
        synchronize(self.dev)
        try:
            return self._run(args, kwargs, full, frozenset())
        except RuntimeError as e:
            if _RESIZE_REFUSED not in str(e) or not host_mappable(self.dev):
                raise
            # An out= or in-place argument CPU must grow (a deprecated but allowed resize) was a
            # zero-copy view of device memory, which cannot grow. CPU's kernels resize before
            # they write, so rerun with the mutated arguments as host copies, adopted below.
            return self._run(args, kwargs, full, self._mutated_ids(full))

    def _mutated_ids(self, full) -> frozenset:
        ids = set()
        for p in self.sch.mutated_positions + SECRETLY_MUTATED.get(self.sch.name, ()):
            v = full[p]
            # a mutated Tensor[] (the _foreach_*_ ops, fused optimizers) mutates each element
            for t in v if isinstance(v, (list, tuple)) else (v,):
                if type(t) is RalTensor:
                    ids.add(id(t))
        return frozenset(ids)

    def _run(self, args, kwargs, full, detached: frozenset):
        """`detached`: ids of the arguments given as host copies even on a host-mappable device."""
        dev = self.dev
        copies: list[tuple[RalTensor, torch.Tensor]] = []
        cpu_of: dict[int, torch.Tensor] = {}

        def down(v):
            if type(v) is RalTensor:
                c = cpu_of.get(id(v))
                if c is None:
                    c = host_copy_of(v) if id(v) in detached else cpu_copy_for_fallback(v)
                    cpu_of[id(v)] = c
                    copies.append((v, c))
                return c
            if isinstance(v, (list, tuple)):
                return type(v)(down(x) for x in v)
            return v

        cpu_args = [down(a) for a in args]
        cpu_kwargs = {k: down(v) for k, v in kwargs.items()}
        for p in self.generators:  # a ral generator (or the device's default) as a CPU one
            gen = rng.cpu_generator(dev, full[p])
            if p < len(cpu_args):
                cpu_args[p] = gen
            else:
                cpu_kwargs[self.sch.names[p]] = gen
        if self.out_fn is not None and not detached and self.keep_layout and host_mappable(dev):
            direct = _into_device(self.out_fn, self.sch.func, cpu_args, cpu_kwargs, dev)
            if direct is not None:
                return direct
        shapes = [(c.shape, c.stride()) for _, c in copies]
        result = _as_on_cpu(self.fn, *cpu_args, **cpu_kwargs)
        _refuse_unrepresentable(result, self.sch.name)
        resized = set()
        for (orig, cpu), before in zip(copies, shapes):
            if (cpu.shape, cpu.stride()) != before:
                _adopt_resized(orig, cpu)  # new geometry and data: nothing to write back
                resized.add(id(orig))
        # Mutated arguments: zero-copy host views (a host-mappable device) were the memory and
        # saw every write, secret mutations included; host copies go back.
        mutated = detached if host_mappable(dev) else self._mutated_ids(full)
        for orig, cpu in copies:
            if id(orig) in mutated and id(orig) not in resized:
                write_back(orig, cpu)
        by_cpu = {id(c): o for o, c in copies}
        return _up(result, by_cpu, dev, self.keep_layout)


_K = torch._C.DispatchKey
# Keys PyTorch's Python fallback leaves excluded while __torch_dispatch__ runs. A CPU kernel
# that makes lazy conjugate or negative views inside (linalg_pinv's Vh.mH() * S, lstsq) then
# read them without their bits: complex pinv came out wrong on both devices, silently.
_VIEW_BIT_KEYS = (
    torch._C.DispatchKeySet(_K.Conjugate)
    | torch._C.DispatchKeySet(_K.Negative)
    | torch._C.DispatchKeySet(_K.ZeroTensor)
)


def _as_on_cpu(fn, *args, **kwargs):
    """fn(*args, **kwargs) with the conjugate, negative and zero-tensor keys active, as a CPU
    call from user code has them."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    if not (exclude & _VIEW_BIT_KEYS):
        return fn(*args, **kwargs)
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude - _VIEW_BIT_KEYS):
        return fn(*args, **kwargs)


# Results at least this large are written by the CPU kernel's out= overload straight into
# device memory (a host-mappable device); smaller ones are not worth the meta run.
DIRECT_MIN_NUMEL = 1 << 15
_NO_OUT = object()
_OUT_OVERLOADS: dict = {}  # functional OpOverload -> its `.out` overload, or None


def _out_overload(sch):
    """The op's `.out` overload when it takes the same arguments plus one `out` tensor and
    the op returns one fresh tensor; else None."""
    if sch.is_inplace or sch.is_out or sch.is_view or sch.n_returns != 1 or not sch.returns_tensor:
        return None
    if sch.mutated_positions or any("Generator" in ts for ts in sch.type_strs):
        return None
    # Matched by argument names and types: clamp_max.Tensor's out form is Tensor_out, and the
    # packet's `out` (clamp_max.out, a Scalar bound) refused its tensor bound.
    want = tuple(zip(sch.names, sch.type_strs))
    packet = sch.func.overloadpacket
    for name in packet.overloads():
        out = getattr(packet, name)
        args = out._schema.arguments
        outs = [a for a in args if a.alias_info is not None and a.alias_info.is_write]
        if len(outs) == 1 and outs[0].name == "out":
            if tuple((a.name, str(a.type)) for a in args if a is not outs[0]) == want:
                return out
    return None


def _meta_of(v):
    if isinstance(v, torch.Tensor):
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_meta_of(x) for x in v)
    return v


def _key_of(v):
    """A hashable stand-in for an argument: a tensor's geometry and dtype, else the value."""
    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), v.stride(), v.dtype)
    if isinstance(v, (list, tuple)):
        return tuple(_key_of(x) for x in v)
    return v


# (func, arguments' key) -> (shape, strides, dtype) of the result, or None: some meta kernels
# are Python decompositions that take milliseconds (upsample_bicubic2d: ~0.3 s under load),
# so each signature runs its meta kernel once.
_RESULT_GEOMETRY: dict = {}


def _result_geometry(func, cpu_args, cpu_kwargs):
    try:
        key = (func, _key_of(cpu_args), _key_of(sorted(cpu_kwargs.items())))
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _RESULT_GEOMETRY:
        return _RESULT_GEOMETRY[key]
    try:
        meta = func(*_meta_of(cpu_args), **_meta_of(cpu_kwargs))
    except Exception:  # no meta kernel, or one that fails: the usual path reports real errors
        meta = None
    geo = None
    if isinstance(meta, torch.Tensor) and meta.numel() >= DIRECT_MIN_NUMEL and is_dense(meta.shape, meta.stride()):
        geo = (tuple(meta.shape), tuple(meta.stride()), meta.dtype)
    if key is not None:
        if len(_RESULT_GEOMETRY) >= 4096:  # a program with ever-new shapes: start over
            _RESULT_GEOMETRY.clear()
        _RESULT_GEOMETRY[key] = geo
    return geo


def _into_device(out_fn, func, cpu_args, cpu_kwargs, dev):
    """Issue 37: the cpu tier took 3-4x CPU's time for a large result (cumsum of 4M floats:
    40-54 ms against 12 ms). The CPU kernel wrote a fresh CPU tensor (page faults on a new
    mapping) and _fill_on_host copied it into a second fresh buffer. Here the kernel's out=
    overload writes straight into the device buffer, laid out as the meta kernel says (the
    layout the vendor tier gives); None (the caller takes the usual path) when the result is
    small or the meta kernel cannot say."""
    geo = _result_geometry(func, cpu_args, cpu_kwargs)
    if geo is None:
        return None
    out = empty_on(dev, geo[0], geo[2], geo[1])
    view = host_view(out)
    _as_on_cpu(out_fn, *cpu_args, **cpu_kwargs, out=view)
    if (tuple(view.shape), view.stride()) != geo[:2]:
        raise RuntimeError(f"{func}: the out= kernel resized a result whose size the meta kernel gave")
    return out


def _refuse_unrepresentable(result, op: str) -> None:
    """A quantized or non-strided (sparse, mkldnn) CPU result cannot become a ral tensor: say
    so before the upload fails with PyTorch's 'Copying from quantized Tensor' or 'Cannot access
    data pointer' message."""
    items = result if isinstance(result, (list, tuple)) else (result,)
    for r in items:
        if not isinstance(r, torch.Tensor):
            continue
        if r.is_quantized:
            raise kind_refused(op, f"quantized ({r.dtype})", "quantize a CPU copy (x.cpu()) instead")
        if r.layout != torch.strided:
            raise kind_refused(op, str(r.layout))


def _adopt_resized(orig: RalTensor, cpu: torch.Tensor) -> None:
    """An out= or in-place op resized its argument on CPU: give the ral tensor the new
    geometry and data, resized as CPU resizes it."""
    # CPU's resize_ keeps the storage where the new size fits, so a resized out= view still
    # aliases its base (`torch.abs(x, out=o[:, ::3])` writes into o). A fresh buffer here lost
    # those writes on a device that is not host-mappable, and unshared the view on one that is.
    resize(orig, cpu.shape)
    if orig.stride() != cpu.stride():  # TensorIterator lays a resized out like its inputs
        offset = orig.storage_offset()
        if (offset + extent_elems(cpu.shape, cpu.stride())) * cpu.itemsize > orig._buf.nbytes:
            fresh = to_device(cpu, orig._dev)  # a layout the kept buffer cannot hold
            restride(orig, fresh._buf, fresh.shape, fresh.stride(), 0)
            return
        restride(orig, orig._buf, cpu.shape, cpu.stride(), offset)
    view = host_view(orig)
    if view is not None and view.data_ptr() == cpu.data_ptr():
        return  # CPU wrote through a zero-copy view of this very memory
    torch.ops.aten.copy_.default(orig, cpu)


def _up(v, by_cpu, dev, keep_layout):
    if type(v) is RalTensor:
        return v  # the CPU kernel itself created a device tensor (an explicit device= argument)
    if isinstance(v, torch.Tensor):
        o = by_cpu.get(id(v))
        if o is not None:
            return o  # an op returning one of its (mutated) arguments
        if v.device.type == "cpu" and host_mappable(dev):
            return _fill_on_host(v, dev, keep_layout)
        return to_device(v, dev, keep_layout=keep_layout)
    if isinstance(v, (list, tuple)):
        return type(v)(_up(x, by_cpu, dev, keep_layout) for x in v)
    return v


def _fill_on_host(v: torch.Tensor, dev: int, keep_layout: bool) -> RalTensor:
    """A result uploaded to a host-mappable device by one CPU copy into the fresh buffer.

    to_device would make a row-major CPU copy of a channels_last conv result first (a
    second pass over it) and then hand the bytes to the stream (a launch and a wake-up of the
    plugin's worker). The device is idle here (run() synchronized it) and the buffer is
    fresh, so PyTorch's own copy_ writes it directly, converting the layout on the way."""
    strides = tuple(v.stride()) if keep_layout and is_dense(v.shape, v.stride()) else None
    out = empty_on(dev, v.shape, v.dtype, strides)
    nbytes = out._buf.nbytes
    if not nbytes:
        return out
    if tuple(out.stride()) == tuple(v.stride()) and not (v.is_conj() or v.is_neg()):
        # the same dense layout: the bytes as they lie (a host view of a fresh buffer costs
        # more than a small op: a mapping and a tensor over it)
        ffi.memmove(ffi.cast("void*", host_address(dev, out._buf.ptr, nbytes)), ffi.cast("void*", v.data_ptr()), nbytes)
    else:
        host_view(out).copy_(v)
    return out


def build(sch, args, kwargs, full, dev) -> CpuRun:
    """The cpu tier serves every call."""
    return CpuRun(sch, dev)
