"""ATen's memory-overlap checks for ops that write into existing tensors.

CPU and CUDA refuse an element-wise write whose output overlaps one of its inputs partially
(`x[1:].mul_(x[:-1])`, `torch.add(a, 1, out=a[1:])`, `x[1:].copy_(x[:-1])`) or refers to one
memory location from several elements (`x[:1].expand(3).add_(1)`): the result would depend
on the order the kernel visits elements. ral kernels visit in their own order, so without
these checks the same program gave different values on ral:0, ral:1 and nowhere an error.
The rules and messages are ATen's (aten/src/ATen/MemoryOverlap.cpp): a check that cannot
decide (a non-dense operand) lets the call through, as there.
"""

from __future__ import annotations

import warnings

import torch

from torch_fl.dispatch.value_checks import VALUE_CHECKS
from torch_fl.tensor.layout import is_dense
from torch_fl.tensor.op_schema import TENSOR_LIST
from torch_fl.tensor.ral_tensor import RalTensor

_INTERNAL = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory "
    "location. Please clone() the tensor before performing the operation."
)
_PARTIAL = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
    "memory location. Please clone() the tensor before performing the operation."
)


def _dense(t) -> bool:
    """is_non_overlapping_and_dense: the elements tile one byte range without gaps or repeats."""
    return is_dense(t.shape, t.stride())


def _sig_strides(t):
    """The strides of a RalTensor, or True when it is contiguous (the routing signature's
    cached form: no stride call for the common case)."""
    sig = t._sig
    if sig is None:
        return True if t.is_contiguous() else t.stride()
    return sig[3]


def assert_no_internal_overlap(t) -> None:
    """Refuse an output in which two elements share one location (an expanded dim)."""
    if type(t) is not RalTensor:
        return
    strides = _sig_strides(t)
    # a zero stride over more than one element is never dense: ATen's "yes" case
    if strides is not True and any(st == 0 and s > 1 for s, st in zip(t.shape, strides)):
        raise RuntimeError(_INTERNAL)


def overlap(a, b) -> str:
    """ATen's MemOverlapStatus of two tensors: "full", "partial", "no" or "too_hard"."""
    if a is b:
        return "full"
    if type(a) is not RalTensor or type(b) is not RalTensor or a._buf is not b._buf:
        return "no"
    if a.numel() == 0 or b.numel() == 0:
        return "no"
    if not _dense(a) or not _dense(b):
        return "too_hard"
    a0 = a.storage_offset() * a.dtype.itemsize
    b0 = b.storage_offset() * b.dtype.itemsize
    a1, b1 = a0 + a.numel() * a.dtype.itemsize, b0 + b.numel() * b.dtype.itemsize
    if a0 == b0 and a1 == b1:
        return "full" if a.stride() == b.stride() else "partial"
    return "partial" if a0 < b1 and b0 < a1 else "no"


def assert_no_partial_overlap(out, src) -> None:
    """Refuse an input that shares some, but not exactly all, of an output's memory."""
    if overlap(out, src) == "partial":
        raise RuntimeError(_PARTIAL)


def check_elementwise_write(sch, full) -> None:
    """TensorIterator's checks for a pointwise op writing in place or into out=: each output
    free of internal overlap, no input partially overlapping an output."""
    for p in sch.return_alias:
        if p < 0:
            continue
        out = full[p]
        if type(out) is not RalTensor:
            continue
        assert_no_internal_overlap(out)
        _check_inputs_against(sch, full, out)


def _check_inputs_against(sch, full, out) -> None:
    """No input partially overlapping out; an in-place op's inputs broadcast to out's shape."""
    buf, shape = out._buf, out.shape
    for pos in sch.input_positions:
        v = full[pos]
        for src in v if sch.kinds[pos] == TENSOR_LIST else (v,):
            # the common case costs one identity test: another buffer cannot overlap
            if src is not out and type(src) is RalTensor and src._buf is buf:
                assert_no_partial_overlap(out, src)
            if sch.is_inplace and isinstance(src, torch.Tensor) and src.shape != shape:
                _refuse_resizing_self(shape, src.shape)


def _refuse_resizing_self(shape, other) -> None:
    """An in-place op cannot grow self to the broadcast shape (`x5x1.add_(y5)`): CPU's error."""
    need = torch.broadcast_shapes(shape, other)
    if need != shape:
        raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast shape {list(need)}")


def copies_onto_itself(dst, src) -> bool:
    """Whether dst.copy_(src) reads every element from the location it writes: src is dst's
    own memory, same dtype, both row-major (`is_contiguous()`) from the same element. A no-op.
    ATen's `matmul(..., out=o)` makes such copies: it writes through `o.reshape(...)`, then
    copies that view back into `o` (flat, `matmul(ND, 1D)`, or `view_as(o)`, whose strides
    may differ from o's in size-1 dims) unless `is_alias_of` says they share storage, which
    two ral views never do (each wrapper has its own C++ storage); ATen's overlap check would
    call the pair a partial overlap. A user's `x.view(1, 8).copy_(x)`, which CPU refuses that
    way, passes here and leaves x as it was."""
    # `x.copy_(x)` itself keeps its old path (the plugin's copy_ kernel, which certify checks)
    if dst is src or type(dst) is not RalTensor or type(src) is not RalTensor or dst._buf is not src._buf:
        return False
    if dst.dtype != src.dtype or dst.storage_offset() != src.storage_offset():
        return False
    # (an empty pair too: matmul(1D, ND with a zero-size batch, out=) copies [0] into [2, 0, 1])
    return dst.numel() == src.numel() and dst.is_contiguous() and src.is_contiguous()


def check_copy(dst, src) -> None:
    """copy_'s checks (ATen copy_impl): dst free of internal overlap, src not partially over it."""
    if dst is src:
        return
    assert_no_internal_overlap(dst)
    assert_no_partial_overlap(dst, src)


def check_cat_out(sch, full) -> None:
    """cat's checks (ATen cat_out): the output free of internal overlap and of any input."""
    out = full[sch.out_positions[0]]
    assert_no_internal_overlap(out)
    for t in full[0]:
        if overlap(out, t) in ("full", "partial"):  # ATen's assert_no_overlap: full counts too
            raise RuntimeError(_PARTIAL)


def check_random_fill(sch, full) -> None:
    """Random in-place fills (TensorIterator's nullary ops): self free of internal overlap.
    uniform_, normal_ and bernoulli_ of an expanded tensor ran on ral, drawing several numbers
    into one location, where CPU refuses (PyTorch's test_torch.py test_bernoulli_mem_overlap)."""
    assert_no_internal_overlap(full[0])


_EXPANDED_MASKED_FILL = (
    "Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing "
    "this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar"
)


def check_masked_fill_(sch, full) -> None:
    """masked_fill_'s rules (ATen masked_fill_impl_cpu): an expanded self is deprecated, warned
    and written, not refused; mask and value may not partially overlap self."""
    self = full[0]
    if type(self) is not RalTensor:
        return
    try:
        assert_no_internal_overlap(self)
    except RuntimeError:
        warnings.warn(_EXPANDED_MASKED_FILL, UserWarning, stacklevel=2)
    _check_inputs_against(sch, full, self)


# op -> its own checks, beyond the rule every pointwise writer follows
_OWN_CHECKS = {
    "aten::cat.out": check_cat_out,
    "aten::masked_fill_.Scalar": check_masked_fill_,
    "aten::masked_fill_.Tensor": check_masked_fill_,
    **{
        op: check_random_fill
        for op in (
            "aten::uniform_",
            "aten::normal_",
            "aten::bernoulli_.float",
            "aten::bernoulli_.Tensor",
            "aten::exponential_",
            "aten::random_",
            "aten::random_.from",
            "aten::random_.to",
            "aten::geometric_",
            "aten::log_normal_",
            "aten::cauchy_",
        )
    },
}


class Checked:
    """A router run whose call first applies the overlap checks, for pointwise ops that write:
    the checks depend on where the operands lie, which no cached decision captures."""

    __slots__ = ("inner", "sch", "tier", "run", "fast_call")

    def __init__(self, inner, sch, check):
        self.inner, self.sch, self.tier = inner, sch, inner.tier
        plain = inner.run
        fast = getattr(inner, "fast_call", None) or plain

        def run(args, kwargs, full):
            check(sch, full)
            return plain(args, kwargs, full)

        def fast_call(args, kwargs, full):
            check(sch, full)
            return fast(args, kwargs, full)

        self.run, self.fast_call = run, fast_call

    def __getattr__(self, name):  # anything else a tier's run object exposes
        return getattr(self.inner, name)


def _both(first, second):
    def check(sch, full) -> None:
        first(sch, full)
        second(sch, full)

    return check


def with_checks(run, sch):
    """`run`, wrapped in the per-call checks its op needs (itself where it needs none): the
    overlap checks here, and a Scalar value's fit in the tensor's dtype (value_checks.py)."""
    check = _OWN_CHECKS.get(sch.name)
    if check is None and sch.pointwise and (sch.is_inplace or sch.is_out):
        check = check_elementwise_write
    value = VALUE_CHECKS.get(sch.name)
    if value is not None:
        check = value if check is None else _both(value, check)
    return run if check is None or run is None else Checked(run, sch, check)
