"""Inputs for certify's manifest-entry checks: seeded CPU arguments for an aten overload and
the layouts and values each check variant puts them in (certify_child.py runs them).

A variant exists to catch one kind of kernel bug: "strided" (a kernel that ignores strides),
"offset" (one that ignores byte_offset), "broadcast" and "0-d operand" (stride-0 and rank-0
operands), "aliased" (an in-place op whose other operand is its output), "alpha/beta"
(non-default scalars), "special values" (nan, inf, -inf, -0.0) and "cast" (copy_ between
dtypes with values that truncate, round or saturate differently). Only what the manifest entry
declares is exercised: a requires_contiguous entry never gets strided or broadcast operands
(the router makes those contiguous before the kernel sees them), but does get offset ones,
which the router passes through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# Shapes of rank r: unequal extents (3, 4, 2, ...) so a transposed index shows; extents fall
# to 1 past rank 8 so a rank-16 tensor stays under a thousand elements.
_EXTENTS = (3, 4, 2, 2, 2, 2, 2, 2)
# The filler of the storage around a strided or offset view: a kernel that reads the wrong
# elements reads these, and a kernel that writes outside its view is caught by comparing it.
_FILL = 7

VARIANTS = (
    "contiguous",
    "strided",
    "offset",
    "broadcast",
    "0-d operand",
    "aliased",
    "alpha/beta",
    "special values",
)


def shape_of(rank: int) -> tuple:
    """The test shape of a rank-`rank` operand."""
    return tuple(_EXTENTS[i] if i < len(_EXTENTS) else 1 for i in range(rank))


def _base_name(op: str) -> str:
    return op.split("::")[-1].split(".")[0]


def rand(shape, dtype, gen):
    """Seeded values of a dtype: small integers, normal floats, random bools."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
    if dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype)
    lo = 0 if dtype == torch.uint8 else -4
    return torch.randint(lo, 5, shape, generator=gen).to(dtype)


# Matrix ops: (shape of self for the entry's rank, shapes of the other tensors). Unequal
# extents so that a kernel mixing up m, k and n fails; addmm/baddbmm take a broadcast bias.
_MATRIX = {
    "mm": ({2: (3, 4)}, [(4, 2)]),
    "addmm": ({0: (), 1: (2,), 2: (3, 2)}, [(3, 4), (4, 2)]),
    "bmm": ({3: (2, 3, 4)}, [(2, 4, 2)]),
    "baddbmm": ({0: (), 1: (2,), 2: (3, 2), 3: (2, 3, 2)}, [(2, 3, 4), (2, 4, 2)]),
    "dot": ({1: (5,)}, [(5,)]),
    "mv": ({2: (3, 4)}, [(4,)]),
}
# Keyword arguments a check needs (the schema's defaults would make CPU refuse the call).
_KWARGS = {"clamp": {"min": -0.5, "max": 0.5}, "clamp_": {"min": -0.5, "max": 0.5}}
_INDEX_OPS = ("gather", "scatter", "scatter_add", "index_select")


@dataclass
class Case:
    """One call: CPU arguments, and for each Tensor argument position its layout."""

    args: list
    kwargs: dict = field(default_factory=dict)
    # Positions of the "data" tensors (same dtype as the entry): the ones a variant re-lays.
    data_pos: list = field(default_factory=list)


def synth(op: str, dtype: torch.dtype, rank: int):
    """A Case for the overload at this dtype and rank, or a string saying why none can be made."""
    from torch_fl.tensor.op_schema import resolve_op

    overload = resolve_op(op)
    base = _base_name(op)
    gen = torch.Generator().manual_seed(0)
    args, data_pos = [], []
    shape = shape_of(rank)
    matrix = _MATRIX.get(base)
    if matrix is not None:
        if rank not in matrix[0]:
            return f"{base} takes no rank-{rank} first operand"
        others = iter(matrix[1])
        shape = matrix[0][rank]
    n_tensors = 0
    for a in overload._schema.arguments:
        if a.kwarg_only or a.has_default_value():
            break
        t, name = str(a.type), a.name
        if t == "Tensor" and name in ("mask", "condition"):
            args.append(torch.randint(0, 2, shape, generator=gen).bool())
        elif t == "Tensor" and name == "index" and base in _INDEX_OPS:
            if not shape and base != "index_select":
                args.append(torch.zeros((), dtype=torch.int64))
            else:
                extent = shape[0] if shape else 1
                idx_shape = (2,) if base == "index_select" else shape
                args.append(torch.randint(0, extent, idx_shape, generator=gen))
        elif t == "Tensor" and name == "value" and base in ("fill_", "masked_fill", "masked_fill_"):
            args.append(torch.tensor(0.25 if dtype.is_floating_point else 3).to(dtype))
        elif t == "Tensor":
            s = shape if matrix is None or n_tensors == 0 else next(others, shape)
            data_pos.append(len(args))
            args.append(rand(s, dtype, gen))
            n_tensors += 1
        elif t == "Optional[Tensor]":
            args.append(None)
        elif t in ("Tensor[]", "List[Tensor]"):
            data_pos.append(len(args))
            args.append([rand(shape, dtype, gen), rand(shape, dtype, gen)])
        elif t == "number":  # Scalar
            args.append(0.5 if dtype.is_floating_point else 2)
        elif t == "int" and "dtype" in name:  # a ScalarType argument
            args.append(dtype)
        elif t == "int":
            args.append({"dim": 0, "start": 0, "end": shape[0] if shape else 1}.get(name, 1))
        elif t == "float":
            args.append(0.5)
        elif t == "bool":
            args.append(False)
        elif t == "SymInt[]" and name == "pad":
            if not shape:
                return "constant_pad_nd needs a rank >= 1 operand"
            args.append([1, 2])
        elif t in ("List[int]", "Optional[List[int]]", "SymInt[]", "int[]", "int[1]", "int[1]?"):
            sizes = "size" in name or "shape" in name
            args.append(list(shape) if sizes else ([0] if rank > 0 else []))
        elif base == "native_batch_norm_backward" and name == "output_mask":
            args.append(None)  # _batch_norm_args fills it in
        else:
            return f"argument {name!r} of type {t} cannot be synthesized"
    if base == "_scaled_dot_product_flash_attention_for_cpu_backward" and rank == 4:
        # out and logsumexp must be the forward's; dropout_p stays the synthesized 0.5, which
        # aten's CPU kernel ignores (its forward refuses dropout).
        try:
            args[4], args[5] = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*args[1:4])
        except RuntimeError as exc:
            return f"CPU's forward rejects the synthesized inputs ({str(exc).splitlines()[0][:200]})"
        data_pos = [0, 1, 2, 3]
    if base in ("native_batch_norm", "native_batch_norm_backward"):
        bn = _batch_norm_args(base, args, dtype, gen)
        if isinstance(bn, str):
            return bn
        args = bn
    kwargs = dict(_KWARGS.get(base, {}))
    if kwargs and not dtype.is_floating_point:
        kwargs = {k: int(v * 4) + 3 for k, v in kwargs.items()}  # 1 and 5: inside every integer dtype
    return Case(args, kwargs, data_pos)


def _batch_norm_args(base: str, args: list, dtype: torch.dtype, gen):
    """native_batch_norm(_backward) arguments with their per-channel tensors filled in.
    The schema makes them optional, but aten's CPU kernel dereferences the absent running
    statistics of an eval-mode call (torch 2.13 segfaults on
    native_batch_norm(x, None, None, None, None, False, ...)), and the backward needs the
    forward's saved statistics; so training mode, real weight/bias/statistics."""
    x = args[0] if base == "native_batch_norm" else args[1]
    if x.dim() < 2:
        return f"{base} needs an [N, C, ...] operand"
    c = x.shape[1]
    w, b, rm = (rand((c,), dtype, gen) for _ in range(3))
    rv = rand((c,), dtype, gen).abs() + 0.5  # a variance is positive
    if base == "native_batch_norm":
        return [x, w, b, rm, rv, True, 0.1, 1e-5]
    _, save_mean, save_invstd = torch.ops.aten.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    return [args[0], x, w, rm, rv, save_mean, save_invstd, True, 1e-5, [True, True, True]]


def _is_inplace(op: str) -> bool:
    return _base_name(op).endswith("_") and not _base_name(op).startswith("_")


def variants_for(op: str, entry, dtype: torch.dtype, rank: int, case: Case) -> list[str]:
    """The variants that exercise only what this entry declares, for this case."""
    from torch_fl.tensor.op_schema import resolve_op, schema_of

    overload = resolve_op(op)
    pointwise = schema_of(overload).pointwise
    tensors = [case.args[p] for p in case.data_pos if isinstance(case.args[p], torch.Tensor)]
    out = ["contiguous", "offset"]
    if not entry.requires_contiguous and any(t.dim() > 0 for t in tensors):
        out.append("strided")
    can_broadcast = entry.broadcast or not entry.requires_contiguous
    if pointwise and can_broadcast and len(tensors) >= 2 and rank >= 1:
        out += ["broadcast", "0-d operand"]
    if _is_inplace(op) and len(tensors) >= 2 and tensors[0].shape == tensors[1].shape:
        out.append("aliased")
    names = {a.name for a in overload._schema.arguments}
    if names & {"alpha", "beta"} and dtype != torch.bool:
        out.append("alpha/beta")
    if pointwise and dtype.is_floating_point:
        out.append("special values")
    return out


def _special(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    flat = t.view(-1)
    for i, v in enumerate((float("nan"), float("inf"), float("-inf"), -0.0)):
        if i < flat.numel():
            flat[i] = v
    return t


def apply_values(op: str, variant: str, dtype: torch.dtype, case: Case) -> Case:
    """The case with the variant's values and shapes (layouts are placed later)."""
    args = list(case.args)
    kwargs = dict(case.kwargs)
    data = [p for p in case.data_pos if isinstance(args[p], torch.Tensor)]
    if variant == "special values":
        for p in data:
            args[p] = _special(args[p])
    elif variant == "broadcast":
        # The second data operand with extent 1 in its first dim: a stride-0 dimension.
        args[data[1]] = args[data[1]][:1].clone()
    elif variant == "0-d operand":
        args[data[1]] = args[data[1]].reshape(-1)[0].clone()
    elif variant == "alpha/beta":
        names = {a.name for a in _schema_args(op)}
        for name, fv, iv in (("alpha", 2.5, 3), ("beta", 0.5, 2)):
            if name in names:
                kwargs[name] = fv if (dtype.is_floating_point or dtype.is_complex) else iv
    return Case(args, kwargs, case.data_pos)


def _schema_args(op):
    from torch_fl.tensor.op_schema import resolve_op

    return resolve_op(op)._schema.arguments


def place(t: torch.Tensor, layout: str, dev: str):
    """(cpu_base, cpu_view, dev_base, dev_view): t's values in a strided or offset view of a
    larger storage filled with _FILL, made on CPU and copied whole (one contiguous transfer),
    so that the device view is a view op and no vendor copy kernel builds the layout."""
    if layout == "strided" and t.dim() > 0:
        big = list(t.shape)
        big[0] *= 2
        big[-1] *= 2 if t.dim() > 1 else 1

        def view(b):
            return b[::2, ..., ::2] if t.dim() > 1 else b[::2]
    elif layout == "offset":
        big = [t.numel() + 3]

        def view(b):
            return b[3:].view(t.shape)
    else:
        cpu = t.clone()
        return cpu, cpu, None, t.to(dev)
    base = torch.full(big, _FILL, dtype=t.dtype)
    view(base).copy_(t)
    dbase = base.to(dev)
    return base, view(base), dbase, view(dbase)


# ---- copy_ between dtypes ----------------------------------------------------------------


def cast_values(src: torch.dtype, dst: torch.dtype) -> torch.Tensor | None:
    """Values whose src -> dst cast is defined and tells truncation, rounding and saturation
    apart: 1.7 -> 1 and -1.7 -> -1 into integers, 0.3 -> True into bool, 1/3 into half."""
    if src == dst:
        return None
    if src == torch.bool:
        return torch.tensor([True, False, True, True])
    if src.is_floating_point:
        vals = [1.7, -1.7, 2.5, -2.5, 0.5, -0.5, 3.999, -0.0, 0.0, 1.0 / 3.0]
        if dst == torch.bool:
            vals += [0.3, float("nan"), float("inf")]
        elif dst.is_floating_point:
            vals += [float("nan"), float("inf"), float("-inf"), 1e-8, 65504.0, 70000.0, 1e-40]
        else:
            info = torch.iinfo(dst)
            vals += [100.9, -100.9, 1e6 + 0.7, -123456.9, 16777216.0, 1e10, -1e10, 255.9]
            vals = [v for v in vals if info.min <= v <= info.max]
        # Keep only what src itself represents (the cast under test is src -> dst).
        t = torch.tensor(vals, dtype=torch.float64).to(src)
        return t if dst.is_floating_point or dst == torch.bool else t[torch.isfinite(t)]
    info = torch.iinfo(src)
    vals = [0, 1, -1, 2, 127, -128, 200, 2**24 + 1, 2**31 - 1, -(2**31), 2**53 + 1]
    vals = [v for v in vals if info.min <= v <= info.max]
    if not (dst.is_floating_point or dst == torch.bool):
        dinfo = torch.iinfo(dst)
        vals = [v for v in vals if dinfo.min <= v <= dinfo.max]
    return torch.tensor(vals, dtype=torch.int64).to(src)
