"""OpenCL C source for the OpenCL plugin's compile entry (lang "opencl-c").

The plugin maps a call to kernel arguments as: per tensor `__global T* p, long offset`
(offset in elements), then each INT/BOOL scalar as `long` and each FLOAT scalar as
`float`, then `long n` (elements of tensors[0]). Its descriptors' sizes/strides do not
reach the kernel, so the geometry travels as trailing INT scalars: a dense flag, then RMAX
sizes and RMAX strides per tensor (dims coalesced and padded to RMAX by the caller).
float64 scalars travel as their bit pattern in a long.

CHUNKS: the kernels' names end in `_chunks`, which tells the plugin that each work-item
walks ceil(n / get_global_size(0)) consecutive elements: on a CPU runtime it launches a few
dozen work-items (one per chunk of >= 4096 elements, as its own CPU-shaped kernels), on a
GPU one per element (a chunk of one). One work-item per element cost PoCL a scheduling step
per work-group and ran the body as scalar code: a 4-output fused kernel over 524k floats
took 7 ms. A chunk's dense loop steps 16 lanes at a time where the expressions allow
(`vector_cl`); a strided chunk finds its first element by division and walks its rows.
"""

from __future__ import annotations

from functools import cache

import torch

from torch_fl.jit.expr import render
from torch_fl.jit.spec import PointwiseSpec, body_lines, uses_double, uses_half
from torch_fl.jit.target import include_dir
from torch_fl.jit.vector_cl import LANES, vectorizable

RMAX = 6


def scalar_param(dt: torch.dtype, tag: str, j: int, ctype) -> tuple[str, str]:
    """(kernel parameter, definition line) of run-time scalar j."""
    ct = ctype(dt)
    if tag == "f" and dt == torch.float64:
        return f"long sb{j}", f"const {ct} s{j} = as_double(sb{j});"
    if tag == "f":
        return f"float sf{j}", f"const {ct} s{j} = ({ct})sf{j};"
    return f"long si{j}", f"const {ct} s{j} = ({ct})si{j};"


# The expression language's sigmoid call (templates.py): OpenCL C has no builtin, and its
# exp is type-generic, so one macro serves half, float and double.
SIGMOID = "#define sigmoid(x) (1 / (1 + exp(-(x))))\n"
# PoCL's float tanh stops at +-0.99999994, even at +-inf (gelu(-inf) came out -inf where CPU
# gives NaN); |x| >= 9.1 rounds to +-1 in float. sizeof limits the fix to float: double is
# exact there, and half converts a float result. Calls of tanh render as ral_tanh (PoCL's
# own tanh is a macro, which cannot be redefined around itself); the same rule as the
# OpenCL plugin's RAL_TANH (kernels/ew.cl).
TANH = "#define ral_tanh(x) ((sizeof(x) == 4 && fabs(x) >= 9.1f) ? sign(x) : tanh(x))\n"
NAMES = {"tanh": "ral_tanh"}
# The 16-lane loop's tanh: PoCL's vector tanh (what the plugin's own kernels compute, 16 lanes
# at a time) with RAL_TANH's rule, lane by lane (select steers by each lane's sign bit).
TANH16 = "#define ral_tanh16(x) select(tanh(x), sign(x), fabs(x) >= 9.1f)\n"
VECTOR_NAMES = {"tanh": "ral_tanh16"}


@cache
def half_source() -> str:
    """ral_half.h's text: an OpenCL program cannot #include the package's headers."""
    with open(f"{include_dir()}/ral_half.h") as f:
        return f.read()


def pointwise_cl(spec: PointwiseSpec, name: str, ctype) -> str:
    """The OpenCL C program of a pointwise kernel called `name` (chunk-walking: see `CHUNKS`)."""
    nt = len(spec.outs) + len(spec.ins)
    params = []
    for k, dt in enumerate(spec.outs + spec.ins):
        const = "const " if k >= len(spec.outs) else ""
        params += [f"__global {const}{ctype(dt)}* p{k}", f"long off{k}"]
    defs = []
    for j, (dt, tag) in enumerate(spec.scalars):
        p, d = scalar_param(dt, tag, j, ctype)
        params.append(p)
        defs.append(d)
    params.append("long dense")
    params += [f"long sz{d}" for d in range(RMAX)]
    params += [f"long st{k}_{d}" for k in range(nt) for d in range(RMAX)]
    params.append("long n")
    inner = RMAX - 1  # coalesce pads in front: the last dim is the innermost one

    # A chunk's first element is found by dividing by each dim's size; the rest of its row
    # follows by adding the innermost strides. Padding dims (size 1) are skipped, and below
    # 2^32 elements the divisions are 32-bit (a 64-bit division per padded dim made a
    # broadcast kernel of 131k floats cost ~2 ms on PoCL).
    def walk_of(ty):
        return [
            f"{{ const {ty} id = rem % ({ty})sz{d}; rem /= ({ty})sz{d}; "
            + " ".join(f"x{k} += id * st{k}_{d};" for k in range(nt))
            + (" col = (long)id; }" if d == inner else " }")
            for d in reversed(range(RMAX))
        ]

    walk32, walk64 = walk_of("uint"), walk_of("long")
    head = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if uses_double(spec.dtypes) else ""
    flat = body_lines(spec, ctype, lambda k: f"off{k} + i", NAMES)
    row = body_lines(spec, ctype, lambda k: f"x{k} + j * st{k}_{inner}", NAMES)
    head += SIGMOID + TANH + TANH16 + (half_source() if uses_half(flat) else "")
    nl, nl2 = "\n    ", "\n      "
    vec, rowvec = "", ""
    if vectorizable(spec) and spec.inner_steps is not None:
        # rows whose outputs are contiguous and whose inputs are contiguous or constant along
        # them (a bias, a [rows, 1] column): the launch was planned for these steps
        steps = spec.inner_steps
        rowvec = f"""{{
      {nl2.join(broadcast_lines(spec, steps))}
      for (; j + {LANES} <= run; j += {LANES}) {{
        {(nl2 + "  ").join(vector_lines(spec, ctype, lambda k: f"x{k} + j", steps))}
      }}
    }}
    """
    if vectorizable(spec):
        vec = f"""for (; i + {LANES} <= end; i += {LANES}) {{
    {nl.join(vector_lines(spec, ctype))}
  }}
  """
    return f"""/* generated by torch_fl.jit */
{head}__kernel void {name}({", ".join(params)}) {{
  const long per = (n + (long)get_global_size(0) - 1) / (long)get_global_size(0);
  long i = (long)get_global_id(0) * per;
  const long end = min(i + per, n);
  if (i >= end) return;
  {nl.join(defs).strip()}
  if (dense) {{
  {vec}for (; i < end; i++) {{
    {nl.join(flat)}
  }}
  return;
  }}
  while (i < end) {{
    {" ".join(f"long x{k} = off{k};" for k in range(nt))}
    long col = 0;
    if (n <= 4294967295L) {{
      uint rem = (uint)i;
      {nl2.join(walk32)}
    }} else {{
      long rem = i;
      {nl2.join(walk64)}
    }}
    const long run = min(end - i, sz{inner} - col);
    long j = 0;
    {rowvec}for (; j < run; j++) {{
      {nl2.join(row)}
    }}
    i += run;
  }}
}}
"""


def vector_lines(spec: PointwiseSpec, ctype, at=lambda k: f"off{k} + i", steps=None) -> list[str]:
    """One step of a loop on LANES consecutive elements (`vector_cl.vectorizable` specs):
    tensor k's first element at `at(k)`; an input whose step (`steps`) is 0 is loaded before
    the loop (`broadcast_lines`)."""
    n_out, vt = len(spec.outs), f"float{LANES}"
    lines = [
        f"const {vt} a{k} = vload{LANES}(0, p{n_out + k} + {at(n_out + k)});"
        for k in range(len(spec.ins))
        if steps is None or steps[k]
    ]
    for name, e in spec.lets:
        lines.append(
            f"const {vt if e.dt == torch.float32 else f'int{LANES}'} {name} = {render(e, ctype, VECTOR_NAMES)};"
        )
    lines += [f"vstore{LANES}({render(e, ctype, VECTOR_NAMES)}, 0, p{o} + {at(o)});" for o, e in spec.stores]
    return lines


def broadcast_lines(spec: PointwiseSpec, steps) -> list[str]:
    """The inputs that stay put along a row (step 0: a [rows, 1] column), as vectors."""
    n_out = len(spec.outs)
    return [
        f"const float{LANES} a{k} = (float{LANES})(p{n_out + k}[x{n_out + k}]);" for k, st in enumerate(steps) if not st
    ]


def coalesce(shape, strides_per_tensor):
    """Merge adjacent dims that are contiguous for every tensor; drop size-1 dims.

    Returns (sizes, strides per tensor) with at least one dim.
    """
    sizes: list[int] = []
    sts: list[list[int]] = [[] for _ in strides_per_tensor]
    for d, sz in enumerate(shape):
        if sz == 1:
            continue
        if sizes and all(st[-1] == s[d] * sz for st, s in zip(sts, strides_per_tensor)):
            sizes[-1] *= sz
            for st, s in zip(sts, strides_per_tensor):
                st[-1] = s[d]
            continue
        sizes.append(sz)
        for st, s in zip(sts, strides_per_tensor):
            st.append(s[d])
    if not sizes:
        sizes = [1]
        sts = [[0] for _ in strides_per_tensor]
    return sizes, sts
