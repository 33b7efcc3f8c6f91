"""What a generated pointwise kernel computes, independent of the language it is written in."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from torch_fl.jit.expr import E, call, cast, render


@dataclass
class PointwiseSpec:
    """Outputs tensors[0..n_out), inputs after them, run-time scalars, and the computation.

    In expressions, input k is `var("a<k>")` in its storage dtype and scalar j is
    `var("s<j>")` in its declared dtype; `lets` define temporaries in order; `stores` write
    output i from an expression (converted to the output dtype).
    """

    outs: list = field(default_factory=list)  # torch dtypes
    ins: list = field(default_factory=list)  # torch dtypes
    scalars: list = field(default_factory=list)  # (torch dtype, tag) tag: "f" float, "i" int/bool
    lets: list = field(default_factory=list)  # (name, E)
    stores: list = field(default_factory=list)  # (output index, E)
    single_op: bool = False  # one aten op's formula (codegen_c: FMA and the vendor's fast math)
    # Each input's stride along the innermost dim (1, or 0 for an input broadcast
    # along it, such as a [rows, 1] column) in the launches it is planned for, when those are
    # not dense; codegen_c then adds a vectorised row loop, codegen_opencl a 16-lane one.
    inner_steps: tuple | None = None

    @property
    def dtypes(self) -> set:
        return set(self.outs) | set(self.ins) | {d for d, _ in self.scalars}


# Half-precision storage: loaded into float, stored from float (ral_half.h).
_LOAD = {torch.float16: "ral_h2f", torch.bfloat16: "ral_bf2f"}
LOWP = tuple(_LOAD)  # the dtypes generated kernels keep as 16-bit storage (target.Target.lowp)
_STORE = {torch.float16: "ral_f2h", torch.bfloat16: "ral_f2bf"}


def load_line(spec: PointwiseSpec, k: int, ctype, index: str) -> str:
    """The statement loading input k as `a<k>` (half precision into a float)."""
    load = f"p{len(spec.outs) + k}[{index}]"
    dt = spec.ins[k]
    return f"const float a{k} = {_LOAD[dt]}({load});" if dt in _LOAD else f"const {ctype(dt)} a{k} = {load};"


def store_line(spec: PointwiseSpec, i: int, e: E, ctype, index: str, names: dict | None = None) -> str:
    """The statement storing e into output i, converted to its dtype."""
    dt = spec.outs[i]
    if dt in _STORE:
        return f"p{i}[{index}] = {_STORE[dt]}({render(cast(e, torch.float32), ctype, names)});"
    return f"p{i}[{index}] = {render(cast(e, dt), ctype, names)};"


def body_lines(spec: PointwiseSpec, ctype, index_of, names: dict | None = None) -> list[str]:
    """Statements computing one element: loads, temporaries, stores (`names`: see render).
    A half-precision input `a<k>` is a float in expressions; so is what a half output stores."""
    n_out = len(spec.outs)
    lines = [load_line(spec, k, ctype, index_of(n_out + k)) for k in range(len(spec.ins))]
    for name, e in spec.lets:
        lines.append(f"const {ctype(e.dt)} {name} = {render(e, ctype, names)};")
    lines += [store_line(spec, i, e, ctype, index_of(i), names) for i, e in spec.stores]
    return lines


_ROUND = {torch.float16: "ral_round_f16", torch.bfloat16: "ral_round_bf16"}


def opmath(dt: torch.dtype) -> torch.dtype:
    """The dtype a kernel computes a dtype's values in: float for half precision, as eager."""
    return torch.float32 if dt in _LOAD else dt


def as_stored(e: E, dt: torch.dtype) -> E:
    """e as an op producing dtype dt stores it: a half result rounded, but kept as a float."""
    if dt in _ROUND:
        return call(_ROUND[dt], cast(e, torch.float32))
    return cast(e, dt)


_HALF_FNS = tuple(f"{f}(" for m in (_LOAD, _STORE, _ROUND) for f in m.values())


def uses_half(body: list[str]) -> bool:
    """Whether a kernel's statements (body_lines) load, store or round half-precision values,
    so that it needs ral_half.h (a float32 kernel with a cast to bfloat16 inside only rounds)."""
    return any(f in line for line in body for f in _HALF_FNS)


def uses_double(spec_dtypes) -> bool:
    """Whether any value of the kernel is float64 (OpenCL then needs cl_khr_fp64)."""
    return torch.float64 in spec_dtypes
