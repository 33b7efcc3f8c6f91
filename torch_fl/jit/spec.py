"""What a generated pointwise kernel computes, independent of the language it is written in."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from torch_fl.jit.expr import cast, render


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

    @property
    def dtypes(self) -> set:
        return set(self.outs) | set(self.ins) | {d for d, _ in self.scalars}


def body_lines(spec: PointwiseSpec, ctype, index_of, names: dict | None = None) -> list[str]:
    """Statements computing one element: loads, temporaries, stores (`names`: see render)."""
    n_out = len(spec.outs)
    lines = []
    for k, dt in enumerate(spec.ins):
        lines.append(f"const {ctype(dt)} a{k} = p{n_out + k}[{index_of(n_out + k)}];")
    for name, e in spec.lets:
        lines.append(f"const {ctype(e.dt)} {name} = {render(e, ctype, names)};")
    for i, e in spec.stores:
        lines.append(f"p{i}[{index_of(i)}] = {render(cast(e, spec.outs[i]), ctype, names)};")
    return lines


def uses_double(spec_dtypes) -> bool:
    """Whether any value of the kernel is float64 (OpenCL then needs cl_khr_fp64)."""
    return torch.float64 in spec_dtypes
