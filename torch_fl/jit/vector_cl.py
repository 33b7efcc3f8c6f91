"""Which pointwise specs an OpenCL kernel can also compute 16 lanes at a time.

PoCL runs a generated kernel's work-items as scalar code: one float per step, a libm call
per element. The OpenCL plugin's own CPU kernels load `float16` vectors (`vload16`) and run
each op on all 16 lanes. A generated kernel gets the same dense loop when the spec's
expressions mean the same on a `float16` as on a `float`: float32 values only, arithmetic,
selections whose conditions are comparisons, and the exact builtins below. Anything else
(integers, casts, half storage, bool values used as numbers, transcendental calls) keeps
the scalar loop.

A vector comparison yields -1 (not 1) for true, so a condition may only steer a `?:`
(which selects by the sign bit for vectors) or another condition; never a value.
"""

from __future__ import annotations

import torch

from torch_fl.jit.expr import E
from torch_fl.jit.spec import PointwiseSpec

LANES = 16
_F32 = torch.float32
# Builtins OpenCL defines for floatn with results exact in both forms. Not the
# transcendentals: PoCL's vector sin, for one, reduces large arguments differently from its
# scalar sin (errors of 1e-2 over wide ranges where the scalar call matches CPU). The one
# exception is tanh (as codegen_opencl's `ral_tanh16`): the OpenCL plugin's own tanh kernel
# computes it 16 lanes at a time, so a fused kernel's lanes give eager ral:1's values.
VECTOR_CALLS = frozenset({"fabs", "fmax", "fmin", "sqrt", "copysign", "floor", "trunc", "rint", "tanh"})
_ARITH = ("+", "-", "*", "/")
_COMPARE = ("<", "<=", ">", ">=", "==", "!=")


def vectorizable(spec: PointwiseSpec) -> bool:
    """Whether every value of `spec` is float32 and every expression means the same per lane."""
    if any(dt != _F32 for dt in (*spec.outs, *spec.ins)) or any(dt != _F32 for dt, _ in spec.scalars):
        return False
    kinds = {f"a{k}": "value" for k in range(len(spec.ins))}
    kinds.update({f"s{j}": "value" for j in range(len(spec.scalars))})
    for name, e in spec.lets:
        if e.dt == _F32 and _value(e, kinds):
            kinds[name] = "value"
        elif e.dt == torch.bool and _condition(e, kinds):
            kinds[name] = "condition"
        else:
            return False
    return all(e.dt == _F32 and _value(e, kinds) for _, e in spec.stores)


def _value(e: E, kinds: dict) -> bool:
    op, a = e.op, e.args
    if e.dt != _F32:
        return False
    if op == "var":
        return kinds.get(a[0]) == "value"
    if op == "lit":
        return True
    if op == "bin":
        return a[0] in _ARITH and _value(a[1], kinds) and _value(a[2], kinds)
    if op == "un":
        return a[0] == "-" and _value(a[1], kinds)
    if op == "sel":
        return _condition(a[0], kinds) and _value(a[1], kinds) and _value(a[2], kinds)
    if op == "call":
        return a[0] in VECTOR_CALLS and all(_value(x, kinds) for x in a[1:])
    return False


def _zero(e: E) -> bool:
    return e.op == "lit" and e.args[0] == 0


def _condition(e: E, kinds: dict) -> bool:
    op, a = e.op, e.args
    if e.dt != torch.bool:
        return False
    if op == "var":
        return kinds.get(a[0]) == "condition"
    if op == "bin" and a[0] in ("==", "!=") and _zero(a[2]):  # a condition tested against 0
        return _condition(a[1], kinds) or _value(a[1], kinds)
    if op == "bin" and a[0] in _COMPARE:
        return _value(a[1], kinds) and _value(a[2], kinds)
    if op == "bin" and a[0] in ("&&", "||"):
        return _condition(a[1], kinds) and _condition(a[2], kinds)
    if op == "un" and a[0] == "!":
        return _condition(a[1], kinds)
    return False
