"""THE table of pointwise templates: aten overload -> expression builder, for every backend.

A template is `fn(k, *args)` over the functional overload's arguments in schema order
(out= arguments dropped). Tensor arguments arrive as expression nodes already converted
to the computation dtype `k.dt` (bool masks and conditions keep their own dtype); Scalar
and float arguments arrive as nodes holding run-time values (or None); every other
argument (ints, strings, bools) arrives as its Python value and is baked into the source.
Formulas follow torch/_refs (the reference decompositions), rewritten onto the math
builtins that C's <tgmath.h> and OpenCL C share. In-place (`add_`) and out= overloads
use the functional overload's template (see `template_for`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from torch_fl.jit.expr import E, call, cast, isnan, land, lift, lnot, lor, where
from torch_fl.tensor.op_schema import op_name

_B = torch.bool


@dataclass(frozen=True)
class Template:
    """How to compute one op: the builder, and whether integer/bool computation is allowed."""

    fn: object
    ints: bool = False
    # A comparison computes in its operands' promoted dtype whatever it writes (bool, or
    # self's dtype in place: int.lt_(0.5) compares in float).
    compares: bool = False


TEMPLATES: dict[str, Template] = {}


def _t(*names, ints=False):
    def deco(fn):
        for n in names:
            TEMPLATES[n] = Template(fn, ints)
        return fn

    return deco


class Ctx:
    """What a template may ask: the computation dtype, and literals of it."""

    __slots__ = ("dt",)

    def __init__(self, dt: torch.dtype):
        self.dt = dt

    @property
    def is_float(self) -> bool:
        return self.dt.is_floating_point

    def c(self, v) -> E:
        """A literal of the computation dtype."""
        return lift(v, self.dt)


def _unary(name, fn):
    TEMPLATES[name] = Template(lambda k, a, fn=fn: call(fn, a))


for _op, _fn in {
    "exp": "exp",
    "exp2": "exp2",
    "expm1": "expm1",
    "log": "log",
    "log2": "log2",
    "log10": "log10",
    "log1p": "log1p",
    "sqrt": "sqrt",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "erf": "erf",
    "erfc": "erfc",
    "lgamma": "lgamma",
    "floor": "floor",
    "ceil": "ceil",
    "trunc": "trunc",
    "round": "rint",
}.items():
    _unary(f"aten::{_op}", _fn)
    if _op in ("floor", "ceil", "trunc", "round"):  # identity on integers
        TEMPLATES[f"aten::{_op}"] = Template(lambda k, a, f=_fn: call(f, a) if k.is_float else a, ints=True)


def _sel_nan(a, v):
    """v, except NaN where a is NaN (torch propagates NaN where C comparisons drop it)."""
    return where(isnan(a), a, v)


@_t("aten::abs", ints=True)
def _abs(k, a):
    return call("fabs", a) if k.is_float else where(a < 0, -a, a)


@_t("aten::neg", ints=True)
def _neg(k, a):
    return -a


@_t("aten::rsqrt")
def _rsqrt(k, a):
    return 1 / call("sqrt", a)


@_t("aten::reciprocal")
def _reciprocal(k, a):
    return 1 / a


@_t("aten::sigmoid")
def _sigmoid(k, a):
    return call("sigmoid", a)  # 1 / (1 + exp(-a)); a call so C can use the vendor's fast form


@_t("aten::logit")
def _logit(k, a, eps):
    x = a if eps is None else where(a < eps, eps, where(a > 1 - eps, 1 - eps, a))
    return call("log", x / (1 - x))


@_t("aten::relu", ints=True)
def _relu(k, a):
    return where(a < 0, 0, a)  # NaN stays NaN


@_t("aten::frac")
def _frac(k, a):
    return a - call("trunc", a)


@_t("aten::round.decimals")
def _round_decimals(k, a, decimals):
    if decimals == 0:
        return call("rint", a)
    ten = k.c(10.0 ** abs(decimals))
    return call("rint", a * ten) / ten if decimals > 0 else call("rint", a / ten) * ten


@_t("aten::sign", ints=True)
def _sign(k, a):  # CPU's (0 < a) - (a < 0): sign(NaN) is 0 and sign(-0.0) is +0, not NaN / -0
    return cast(a > 0, k.dt) - cast(a < 0, k.dt)


@_t("aten::sgn")
def _sgn(k, a):
    return _sign(k, a)


@_t("aten::signbit", ints=True)
def _signbit(k, a):
    # not signbit(): GCC 12 crashes vectorising it on a float made from bfloat16 bits
    return call("copysign", 1.0, a) < 0 if k.is_float else a < 0


@_t("aten::isnan", ints=True)
def _isnan(k, a):
    return isnan(a)


@_t("aten::isinf", ints=True)
def _isinf(k, a):
    return call("isinf", a, dt=_B) if k.is_float else a.ne(a)


@_t("aten::isfinite", ints=True)
def _isfinite(k, a):
    return call("isfinite", a, dt=_B) if k.is_float else a.eq(a)


@_t("aten::isposinf", ints=True)
def _isposinf(k, a):
    return a.eq(math.inf) if k.is_float else a.ne(a)


@_t("aten::isneginf", ints=True)
def _isneginf(k, a):
    return a.eq(-math.inf) if k.is_float else a.ne(a)


@_t("aten::deg2rad")
def _deg2rad(k, a):
    return a * k.c(math.pi / 180.0)


@_t("aten::rad2deg")
def _rad2deg(k, a):
    return a * k.c(180.0 / math.pi)


@_t("aten::sinc")
def _sinc(k, a):
    x = a * k.c(math.pi)
    return where(a.eq(0), 1, call("sin", x) / x)


@_t("aten::silu")
def _silu(k, a):
    return a * call("sigmoid", a)


@_t("aten::mish")
def _mish(k, a):
    return a * call("tanh", _softplus(k, a, None, None))


@_t("aten::softplus")
def _softplus(k, a, beta, threshold):
    b = k.c(1.0) if beta is None else beta
    t = k.c(20.0) if threshold is None else threshold
    return where(a * b > t, a, call("log1p", call("exp", a * b)) / b)


@_t("aten::hardsigmoid")
def _hardsigmoid(k, a):
    return _clamp(k, a + 3, k.c(0.0), k.c(6.0)) / 6


@_t("aten::hardswish")
def _hardswish(k, a):
    return a * _clamp(k, a + 3, k.c(0.0), k.c(6.0)) / 6


@_t("aten::hardtanh", ints=True)
def _hardtanh(k, a, lo, hi):
    return _clamp(k, a, lo, hi)


# expm1, as CPU's kernel and torch._refs: exp(x) - 1 loses every digit of a small negative x
# (elu(-1e-6) was 1.3% off, elu(-1e-30) 0 instead of -1e-30, elu(-0.0) +0 instead of -0).
@_t("aten::elu")
def _elu(k, a, alpha, scale, input_scale):
    return where(a > 0, a * scale, alpha * scale * call("expm1", a * input_scale))


@_t("aten::celu")
def _celu(k, a, alpha):  # CPU: elu with input_scale = 1 / alpha
    return where(a > 0, a, alpha * call("expm1", a * (1 / alpha)))


@_t("aten::leaky_relu")
def _leaky_relu(k, a, slope):
    return where(a > 0, a, a * slope)


@_t("aten::softshrink")
def _softshrink(k, a, lambd):  # CPU's a * 0 inside: NaN stays NaN, -0.3 gives -0.0
    return where(a > lambd, a - lambd, where(a < -lambd, a + lambd, a * 0))


@_t("aten::hardshrink")
def _hardshrink(k, a, lambd):  # CPU's test, so NaN (outside every range) stays NaN
    return where(land(a >= -lambd, a <= lambd), 0, a)


@_t("aten::threshold", ints=True)
def _threshold(k, a, threshold, value):  # CPU: a <= threshold ? value : a (NaN stays NaN)
    return where(a <= threshold, value, a)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@_t("aten::gelu")
def _gelu(k, a, approximate):
    if approximate == "tanh":
        inner = k.c(_SQRT_2_OVER_PI) * (a + k.c(0.044715) * a * a * a)
        return k.c(0.5) * a * (1 + call("tanh", inner))
    return k.c(0.5) * a * (1 + call("erf", a * k.c(1 / math.sqrt(2.0))))


@_t("aten::gelu_backward")
def _gelu_backward(k, g, a, approximate):
    # torch._decomp's gelu_backward: d/dx of the forward formula above.
    if approximate == "tanh":
        t = call("tanh", k.c(_SQRT_2_OVER_PI) * (a + k.c(0.044715) * a * a * a))
        inner_d = k.c(_SQRT_2_OVER_PI) * (1 + k.c(3 * 0.044715) * a * a)
        return g * (k.c(0.5) * (1 + t) + k.c(0.5) * a * (1 - t * t) * inner_d)
    cdf = k.c(0.5) * (1 + call("erf", a * k.c(1 / math.sqrt(2.0))))
    pdf = call("exp", k.c(-0.5) * a * a) * k.c(1 / math.sqrt(2.0 * math.pi))
    return g * (cdf + a * pdf)


@_t("aten::logical_not", ints=True)
def _logical_not(k, a):
    return lnot(a)


@_t("aten::bitwise_not", ints=True)
def _bitwise_not(k, a):
    if k.is_float:
        return None
    return lnot(a) if k.dt == _B else ~a


@_t("aten::nan_to_num")
def _nan_to_num(k, a, nan, posinf, neginf):
    big = torch.finfo(k.dt).max
    pos = k.c(big) if posinf is None else posinf
    neg = k.c(-big) if neginf is None else neginf
    nn = k.c(0.0) if nan is None else nan
    return where(isnan(a), nn, where(a.eq(math.inf), pos, where(a.eq(-math.inf), neg, a)))


# ------------------------------------------------------------------------ binary


@_t("aten::add.Tensor", "aten::add.Scalar", ints=True)
def _add(k, a, b, alpha):
    return a + b * alpha


@_t("aten::sub.Tensor", "aten::sub.Scalar", ints=True)
def _sub(k, a, b, alpha):
    return a - b * alpha


@_t("aten::rsub.Tensor", "aten::rsub.Scalar", ints=True)
def _rsub(k, a, b, alpha):
    return b - a * alpha


@_t("aten::mul.Tensor", "aten::mul.Scalar", ints=True)
def _mul(k, a, b):
    return a * b


@_t("aten::div.Tensor", "aten::div.Scalar")
def _div(k, a, b):
    return a / b


@_t("aten::div.Tensor_mode", "aten::div.Scalar_mode")
def _div_mode(k, a, b, rounding_mode):
    if rounding_mode == "trunc":
        return call("trunc", a / b)
    if rounding_mode == "floor":
        return _floor_divide(k, a, b)
    return a / b


@_t("aten::floor_divide", "aten::floor_divide.Scalar")
def _floor_divide(k, a, b):
    # torch's div_floor_floating: floor of the exact quotient (fmod keeps it exact).
    mod = call("fmod", a, b)
    div = (a - mod) / b
    div = where(land(mod.ne(0), (b < 0).ne(mod < 0)), div - 1, div)
    fl = call("floor", div)
    fl = where(div - fl > k.c(0.5), fl + 1, fl)
    return where(b.eq(0), a / b, where(div.eq(0), call("copysign", k.c(0.0), a / b), fl))


@_t("aten::remainder.Tensor", "aten::remainder.Scalar")
def _remainder(k, a, b):
    r = call("fmod", a, b)
    return where(land(r.ne(0), (r < 0).ne(b < 0)), r + b, r)


@_t("aten::fmod.Tensor", "aten::fmod.Scalar")
def _fmod(k, a, b):
    return call("fmod", a, b)


@_t("aten::pow.Tensor_Tensor", "aten::pow.Scalar")
def _pow(k, a, b):  # CPU: std::pow per element, no special exponents (pow(-inf, 0.5) is +inf)
    return call("pow", a, b)


@_t("aten::pow.Tensor_Scalar")
def _pow_scalar_exponent(k, a, b):
    p = call("pow", a, b)
    if not (isinstance(a, E) and isinstance(b, E) and a.dt.is_floating_point):
        return p
    # The exponents PyTorch's CPU kernel special-cases (pow_tensor_scalar_optimized_kernel),
    # the same way: matches its results (x ** 0.5 at -inf is sqrt's NaN, where std::pow gives
    # +inf) and avoids pow(), which is slow on a CPU OpenCL runtime (GPT-2's gelu_new ran 2x
    # slower fused). Only this overload: a tensor or scalar base with a tensor exponent is
    # std::pow on CPU.
    one = lift(1, a.dt)
    if b.op == "lit":  # a baked exponent (compile backend): choose the form now
        forms = {2: lambda: a * a, 3: lambda: a * a * a, 0.5: lambda: call("sqrt", a)}
        forms |= {-0.5: lambda: one / call("sqrt", a), -1: lambda: one / a, -2: lambda: one / (a * a)}
        form = forms.get(b.args[0])
        return form() if form is not None else p
    r = where(b.eq(-2), one / (a * a), p)
    r = where(b.eq(-1), one / a, r)
    r = where(b.eq(-0.5), one / call("sqrt", a), r)
    r = where(b.eq(0.5), call("sqrt", a), r)
    r = where(b.eq(3), a * a * a, r)
    return where(b.eq(2), a * a, r)


@_t("aten::maximum", "aten::max.other", ints=True)
def _maximum(k, a, b):
    return _sel_nan(a, _sel_nan(b, where(a > b, a, b)))


@_t("aten::minimum", "aten::min.other", ints=True)
def _minimum(k, a, b):
    return _sel_nan(a, _sel_nan(b, where(a < b, a, b)))


@_t("aten::fmax", ints=True)
def _fmax(k, a, b):
    return call("fmax", a, b) if k.is_float else where(a > b, a, b)


@_t("aten::fmin", ints=True)
def _fmin(k, a, b):
    return call("fmin", a, b) if k.is_float else where(a < b, a, b)


@_t("aten::atan2")
def _atan2(k, a, b):
    return call("atan2", a, b)


@_t("aten::hypot")
def _hypot(k, a, b):
    return call("hypot", a, b)


@_t("aten::copysign.Tensor", "aten::copysign.Scalar")
def _copysign(k, a, b):
    return call("copysign", a, b)


@_t("aten::nextafter")
def _nextafter(k, a, b):
    return call("nextafter", a, b)


@_t("aten::heaviside")
def _heaviside(k, a, b):  # CPU: a == 0 ? b : (a > 0), so NaN gives 0
    return where(a.eq(0), b, cast(a > 0, k.dt))


@_t("aten::xlogy.Tensor", "aten::xlogy.Scalar_Other", "aten::xlogy.Scalar_Self")
def _xlogy(k, a, b):
    return where(isnan(b), b, where(a.eq(0), 0, a * call("log", b)))


@_t("aten::special_xlog1py")
def _xlog1py(k, a, b):
    return where(isnan(b), b, where(a.eq(0), 0, a * call("log1p", b)))


@_t("aten::logaddexp")
def _logaddexp(k, a, b):
    m = where(a > b, a, b)
    d = call("fabs", a - b)
    both_inf = land(call("isinf", a, dt=_B), a.eq(b))
    return where(both_inf, a, m + call("log1p", call("exp", -d)))


@_t("aten::logaddexp2")
def _logaddexp2(k, a, b):
    m = where(a > b, a, b)
    d = call("fabs", a - b)
    both_inf = land(call("isinf", a, dt=_B), a.eq(b))
    return where(both_inf, a, m + call("log1p", call("exp2", -d)) * k.c(1 / math.log(2.0)))


def _cmp(sym):
    def fn(k, a, b):
        return E("bin", (sym, a, lift(b, a.dt)), _B)

    return fn


for _name, _sym in {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}.items():
    for _ov in ("Tensor", "Scalar"):
        TEMPLATES[f"aten::{_name}.{_ov}"] = Template(_cmp(_sym), ints=True, compares=True)


@_t("aten::logical_and", ints=True)
def _logical_and(k, a, b):
    return land(a.ne(0), b.ne(0))


@_t("aten::logical_or", ints=True)
def _logical_or(k, a, b):
    return lor(a.ne(0), b.ne(0))


@_t("aten::logical_xor", ints=True)
def _logical_xor(k, a, b):
    return E("bin", ("!=", a.ne(0), b.ne(0)), _B)


def _bitwise(sym):
    def fn(k, a, b):
        return None if k.is_float else E("bin", (sym, a, b), k.dt)

    return fn


for _name, _sym in {"and": "&", "or": "|", "xor": "^"}.items():
    for _ov in ("Tensor", "Scalar"):
        TEMPLATES[f"aten::bitwise_{_name}.{_ov}"] = Template(_bitwise(_sym), ints=True)


# ------------------------------------------------------------------------ ternary and friends


@_t("aten::clamp", "aten::clamp.Tensor", ints=True)
def _clamp(k, a, lo, hi):
    x = a
    if lo is not None:
        x = _sel_nan(lo, where(x < lo, lo, x))
    if hi is not None:
        x = _sel_nan(hi, where(x > hi, hi, x))
    return x


@_t("aten::clamp_min", "aten::clamp_min.Tensor", ints=True)
def _clamp_min(k, a, lo):
    return _clamp(k, a, lo, None)


@_t("aten::clamp_max", "aten::clamp_max.Tensor", ints=True)
def _clamp_max(k, a, hi):
    return _clamp(k, a, None, hi)


@_t("aten::where.self", "aten::where.ScalarSelf", "aten::where.ScalarOther", "aten::where.Scalar", ints=True)
def _where(k, cond, a, b):
    return where(cond.ne(0), a, b)


@_t("aten::masked_fill.Scalar", "aten::masked_fill.Tensor", ints=True)
def _masked_fill(k, a, mask, value):
    return where(mask.ne(0), value, a)


@_t("aten::lerp.Scalar", "aten::lerp.Tensor")
def _lerp(k, a, end, weight):
    d = end - a
    return where(call("fabs", weight) < 0.5, a + weight * d, end - d * (1 - weight))


@_t("aten::addcmul", ints=True)
def _addcmul(k, a, t1, t2, value):
    return a + value * t1 * t2


@_t("aten::addcdiv")
def _addcdiv(k, a, t1, t2, value):
    return a + value * (t1 / t2)


@_t("aten::sigmoid_backward")
def _sigmoid_backward(k, g, y):
    return g * (1 - y) * y


@_t("aten::tanh_backward")
def _tanh_backward(k, g, y):
    return g * (1 - y * y)


@_t("aten::threshold_backward", ints=True)
def _threshold_backward(k, g, a, threshold):  # CPU: a <= threshold ? 0 : g (NaN passes g)
    return where(a <= threshold, 0, g)


@_t("aten::silu_backward")
def _silu_backward(k, g, a):
    s = call("sigmoid", a)
    return g * s * (1 + a * (1 - s))


# Arguments that keep their own dtype instead of joining type promotion.
def _functional_name(func) -> str | None:
    """The overload whose template serves func: itself, its functional form, or None."""
    name = op_name(func)
    if name in TEMPLATES:
        return name
    s = func._schema
    base = s.name[:-1] if s.name.endswith("_") else s.name
    if base != s.name:  # in-place: same overload name, same arguments
        cand = f"{base}.{s.overload_name}" if s.overload_name else base
        return cand if cand in TEMPLATES else None
    if any(a.is_out for a in s.arguments):
        want = [a.name for a in s.arguments if not a.is_out]
        packet = getattr(torch.ops.aten, base.split("::")[1], None)
        for ov in packet.overloads() if packet is not None else ():
            other = getattr(packet, ov)
            if [a.name for a in other._schema.arguments] == want and not any(a.is_out for a in other._schema.arguments):
                cand = op_name(other)
                return cand if cand in TEMPLATES else None
    return None


_RESOLVED: dict = {}


def template_for(func) -> Template | None:
    """The template of an aten overload (in-place and out= forms included), or None."""
    try:
        return _RESOLVED[func]
    except KeyError:
        name = _functional_name(func)
        t = _RESOLVED[func] = TEMPLATES.get(name) if name else None
        return t
