"""A tiny typed expression IR for generated pointwise kernels, rendered as C-family text.

Every node carries its torch dtype, so literals and casts render with the right type in
both C and OpenCL C (the two languages share expression syntax; only the names of the
storage types differ, and the caller supplies those).
"""

from __future__ import annotations

import math

import torch

_BOOL = torch.bool


class E:
    """One expression node: `op` with `args`, of dtype `dt`."""

    __slots__ = ("op", "args", "dt")

    def __init__(self, op: str, args: tuple, dt: torch.dtype):
        self.op = op
        self.args = args
        self.dt = dt

    # Arithmetic: a Python number on either side becomes a literal of this node's dtype.
    def _bin(self, sym, other, swap=False, dt=None):
        o = lift(other, self.dt)
        a, b = (o, self) if swap else (self, o)
        if dt is None and self.dt == _BOOL and sym in "+-*":
            # C does bool arithmetic in int (True + True * True is 2), which a bool store
            # kept as the byte 2; torch's bool result is that value != 0
            return E("bin", ("!=", E("bin", (sym, a, b), torch.int32), E("lit", (0,), torch.int32)), _BOOL)
        return E("bin", (sym, a, b), dt or self.dt)

    def __add__(self, o):
        return self._bin("+", o)

    def __radd__(self, o):
        return self._bin("+", o, True)

    def __sub__(self, o):
        return self._bin("-", o)

    def __rsub__(self, o):
        return self._bin("-", o, True)

    def __mul__(self, o):
        return self._bin("*", o)

    def __rmul__(self, o):
        return self._bin("*", o, True)

    def __truediv__(self, o):
        return self._bin("/", o)

    def __rtruediv__(self, o):
        return self._bin("/", o, True)

    def __neg__(self):
        return E("un", ("-", self), self.dt)

    def __lt__(self, o):
        return self._bin("<", o, dt=_BOOL)

    def __le__(self, o):
        return self._bin("<=", o, dt=_BOOL)

    def __gt__(self, o):
        return self._bin(">", o, dt=_BOOL)

    def __ge__(self, o):
        return self._bin(">=", o, dt=_BOOL)

    def eq(self, o):
        """Elementwise ==, as a bool node (== stays Python identity for dict keys)."""
        return self._bin("==", o, dt=_BOOL)

    def ne(self, o):
        """Elementwise !=, as a bool node."""
        return self._bin("!=", o, dt=_BOOL)

    def __and__(self, o):
        return self._bin("&", o)

    def __or__(self, o):
        return self._bin("|", o)

    def __xor__(self, o):
        return self._bin("^", o)

    def __invert__(self):
        return E("un", ("~", self), self.dt)


def lift(v, dt: torch.dtype) -> E:
    """A node as is, or a Python number as a literal of dtype dt."""
    return v if isinstance(v, E) else E("lit", (v,), dt)


def var(name: str, dt: torch.dtype) -> E:
    """A named value already defined in the kernel (a loaded input, a scalar, a temp)."""
    return E("var", (name,), dt)


def call(fn: str, *args, dt: torch.dtype | None = None) -> E:
    """A math builtin common to C (<tgmath.h>) and OpenCL C, e.g. call('exp', x)."""
    first = next(a for a in args if isinstance(a, E))
    node = E("call", (fn, *[lift(a, first.dt) for a in args]), dt or first.dt)
    if dt == _BOOL:  # classification macros return "nonzero", not 1 (C's signbit gives 0x80000000)
        return E("bin", ("!=", E("call", node.args, torch.int32), E("lit", (0,), torch.int32)), _BOOL)
    return node


def cast(x, dt: torch.dtype) -> E:
    """x converted to dtype dt (bool: x != 0, as torch does)."""
    if isinstance(x, E) and x.dt == dt:
        return x
    return E("cast", (lift(x, dt),), dt)


def where(c: E, a, b) -> E:
    """c ? a : b, typed by whichever branch is a node."""
    dt = a.dt if isinstance(a, E) else b.dt
    return E("sel", (c, lift(a, dt), lift(b, dt)), dt)


def land(a: E, b: E) -> E:
    """Logical and of two conditions."""
    return E("bin", ("&&", a, b), _BOOL)


def lor(a: E, b: E) -> E:
    """Logical or of two conditions."""
    return E("bin", ("||", a, b), _BOOL)


def lnot(a: E) -> E:
    """Logical not of a condition (or of a value compared with zero)."""
    return E("un", ("!", a), _BOOL)


def isnan(a: E) -> E:
    """a != a: true only for NaN (false for every integer)."""
    return a.ne(a)


def _literal(v, dt: torch.dtype, ctype) -> str:
    if dt.is_floating_point:
        f = float(v)
        if math.isnan(f):
            return "NAN"
        if math.isinf(f):
            return "INFINITY" if f > 0 else "(-INFINITY)"
        text = repr(f) + ("f" if dt == torch.float32 else "")
        # parenthesised when negative: a unary minus in front must not make "--0.5f"
        return f"({text})" if text.startswith("-") else text
    if dt == _BOOL:
        return "1" if v else "0"
    iv = int(v)
    if iv == -(2**63):  # not a valid C literal as written
        return "(-9223372036854775807L - 1)"
    return f"(({ctype(dt)}){iv}L)" if dt == torch.int64 else f"(({ctype(dt)}){iv})"


def render(e: E, ctype, names: dict | None = None) -> str:
    """C/OpenCL C text of an expression; ctype maps a torch dtype to the language's type,
    `names` a builtin's name to the function a language calls instead."""
    op, a = e.op, e.args
    if op == "var":
        return a[0]
    if op == "lit":
        return _literal(a[0], e.dt, ctype)
    if op == "bin":
        return f"({render(a[1], ctype, names)} {a[0]} {render(a[2], ctype, names)})"
    if op == "un":
        return f"({a[0]}{render(a[1], ctype, names)})"
    if op == "call":
        fn = names.get(a[0], a[0]) if names else a[0]
        return f"{fn}({', '.join(render(x, ctype, names) for x in a[1:])})"
    if op == "sel":
        return f"({render(a[0], ctype, names)} ? {render(a[1], ctype, names)} : {render(a[2], ctype, names)})"
    if op == "cast":
        inner = render(a[0], ctype, names)
        if e.dt == _BOOL:
            return f"(({ctype(e.dt)})(({inner}) != 0))"
        return f"(({ctype(e.dt)})({inner}))"
    raise ValueError(f"unknown expression node {op!r}")
