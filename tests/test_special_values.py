"""Special values (infinities, NaN, signed zeros, tiny and huge magnitudes) through the
unary and binary math ops on both devices, routed as usual and with the jit tier forced, against CPU.

OpInfo samples seldom hold these. The rule per element: NaN where CPU gives NaN, the same
infinity, the same signed zero, and a finite result no further from the float64 result than
8x CPU's own error or 1e-5 relative. docs/conformance.md (*Special values*) lists what this
found and the CPU results that are deliberately not copied.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import torch_fl
import torch_fl.jit as J

F = torch.nn.functional
UNARY = {
    "exp": torch.exp, "expm1": torch.expm1, "log": torch.log, "log1p": torch.log1p, "log2": torch.log2,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "erf": torch.erf,
    "erfc": torch.erfc, "sin": torch.sin, "cos": torch.cos, "atan": torch.atan, "asinh": torch.asinh,
    "sinh": torch.sinh, "cosh": torch.cosh, "reciprocal": torch.reciprocal, "exp2": torch.exp2, "silu": F.silu,
    "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "softplus": F.softplus, "mish": F.mish,
    "elu": F.elu, "selu": F.selu, "celu": lambda t: F.celu(t, alpha=1.7), "logsigmoid": F.logsigmoid,
    "hardswish": F.hardswish, "sign": torch.sign, "frac": torch.frac, "trunc": torch.trunc, "round": torch.round,
    "square": torch.square, "abs": torch.abs, "neg": torch.neg, "relu": F.relu, "leaky_relu": F.leaky_relu,
    "softsign": F.softsign, "logit": torch.logit, "atanh": torch.atanh, "asin": torch.asin, "acosh": torch.acosh,
    "sinc": torch.sinc, "nan_to_num": torch.nan_to_num, "isfinite": torch.isfinite, "signbit": torch.signbit,
    "threshold": lambda t: F.threshold(t, 0.5, -3.0), "hardshrink": lambda t: F.hardshrink(t, 0.5),
    "softshrink": lambda t: F.softshrink(t, 0.5), "hardtanh": F.hardtanh, "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid,
}  # fmt: skip
# CPU results not copied (docs/conformance.md): gelu(+inf) is NaN on CPU; tanh-gelu below -4.5
# is a cancellation (1 + tanh(x) of a few ulps) where CPU's float32 result is itself inexact.
SKIP = {"gelu": lambda x: x == math.inf, "gelu_tanh": lambda x: x < -4.5}
# softshrink inside [-lambd, lambd]: CPU's scalar path returns x * 0 (-0.0 for negative x), its
# vector path +0.0, so the sign of that zero is no CPU contract (NaN still must stay NaN).
UNARY_ZERO_SIGN_FREE = {"softshrink"}


def _inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    mag = torch.exp(torch.empty(2048, dtype=torch.float64).uniform_(-80, 80, generator=g))
    sign = torch.where(torch.rand(2048, generator=g) < 0.5, -1.0, 1.0).double()
    unit = torch.empty(512, dtype=torch.float64).uniform_(-10, 10, generator=g)
    special = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 1e-30, -1e-30, 1e-6, -1e-6, 88.7, -103.9]
    return torch.cat([mag * sign, unit, torch.tensor(special, dtype=torch.float64)])


def _devices():
    out = []
    for plugin in ("host", "opencl"):
        p = next((p for p in torch_fl.plugins() if p.record.name == plugin and p.devices), None)
        mark = pytest.mark.skipif(p is None, reason=f"no {plugin} device")
        out.append(pytest.param(f"ral:{p.devices[0]}" if p else None, id=plugin, marks=mark))
    return out


def _wrong(x: float, got, cpu, exact, zero_sign=True) -> bool:
    if isinstance(got, bool):
        return got != cpu
    if got != got or cpu != cpu:
        return (got != got) != (cpu != cpu)
    if got == cpu:
        return zero_sign and math.copysign(1, got) != math.copysign(1, cpu)
    if math.isinf(got) or math.isinf(cpu):
        return True
    return abs(got - exact) > max(8 * abs(cpu - exact), 1e-5 * abs(exact), 1e-37)


def _on_device(fn, x, dev, style):
    if style == "mode":  # CPU tensors in, the mode moves them
        with torch_fl.ral_mode(dev):
            return fn(x).cpu()
    return fn(x.to(dev)).cpu()


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("tier", ["routed", "jit"])
@pytest.mark.parametrize("dev", _devices())
def test_unary_special_values_match_cpu(dev, tier, style):
    x64 = _inputs()
    x = x64.float()
    J.force(tier == "jit")
    try:
        failures = {}
        for name, fn in UNARY.items():
            got, cpu, exact = _on_device(fn, x, dev, style).tolist(), fn(x).tolist(), fn(x64).tolist()
            skip = SKIP.get(name, lambda v: False)
            signed = name not in UNARY_ZERO_SIGN_FREE
            bad = [
                (v, g, c)
                for v, g, c, e in zip(x.tolist(), got, cpu, exact)
                if not skip(v) and _wrong(v, g, c, e, signed)
            ]
            if bad:
                failures[name] = bad[:3]
        assert not failures, failures
    finally:
        J.force(False)


# Every pair of these: CPU's special-value rules for two operands. Denormals are left out:
# CPU's vectorised float32 fmod and addcdiv give NaN for them.
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-30, -1e-30, 1e30, -1e30, math.inf, -math.inf, math.nan, 7.0]
BINARY = {
    "add": torch.add, "mul": torch.mul, "div": torch.div, "pow": torch.pow, "pow 0.5": lambda x, y: x**0.5,
    "pow -0.5": lambda x, y: x**-0.5, "pow 3": lambda x, y: x**3.0, "pow -2": lambda x, y: x**-2.0,
    "heaviside": torch.heaviside,
    "atan2": torch.atan2, "hypot": torch.hypot, "maximum": torch.maximum, "fmin": torch.fmin,
    "copysign": torch.copysign, "logaddexp": torch.logaddexp, "xlogy": torch.xlogy,
    "floor divide": lambda x, y: torch.div(x, y, rounding_mode="floor"), "lt": torch.lt,
    "where": lambda x, y: torch.where(x > y, x, y), "clamp": lambda x, y: torch.clamp(x, min=y),
    # backward ops (x the forward's input, y the incoming gradient): NaN inputs pass the gradient
    "threshold_backward": lambda x, y: torch.ops.aten.threshold_backward(y, x, 0.5),
    "hardtanh_backward": lambda x, y: torch.ops.aten.hardtanh_backward(y, x, -1.0, 1.0),
    "leaky_relu_backward": lambda x, y: torch.ops.aten.leaky_relu_backward(y, x, 0.1, False),
}  # fmt: skip
# not remainder: CPU's vector path computes a - b * floor(a / b), NaN once a / b overflows.
# The sign of min/max/clamp(0.0, -0.0) is no CPU contract: its scalar and vector paths differ.
ZERO_SIGN_FREE = {"maximum", "fmin", "clamp"}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("tier", ["routed", "jit"])
@pytest.mark.parametrize("dev", _devices())
def test_binary_special_values_match_cpu(dev, tier, style):
    """All pairs of special values: NaN where CPU has NaN, infinities and signs of zero as
    CPU's, finite results within 4e-6 relative. pow with a tensor exponent is std::pow on CPU
    (pow(-inf, 0.5) = +inf) while `x ** 0.5` is sqrt (NaN there); heaviside(NaN) is 0."""
    pairs = list(itertools.product(EDGES, EDGES))
    a, b = torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])
    J.force(tier == "jit")
    try:
        failures = {}
        for name, fn in BINARY.items():
            if style == "mode":
                with torch_fl.ral_mode(dev):
                    got = fn(a, b).cpu().tolist()
            else:
                got = fn(a.to(dev), b.to(dev)).cpu().tolist()
            bad = []
            for pair, g, w in zip(pairs, got, fn(a, b).tolist()):
                if isinstance(g, bool) or (g != g and w != w):
                    if g != w and not (g != g and w != w):
                        bad.append((pair, g, w))
                    continue
                if g == w and (name in ZERO_SIGN_FREE or math.copysign(1, g) == math.copysign(1, w)):
                    continue
                if math.isfinite(g) and math.isfinite(w) and w != 0 and abs(g - w) <= 4e-6 * abs(w):
                    continue
                bad.append((pair, g, w))
            if bad:
                failures[name] = bad[:3]
        assert not failures, failures
    finally:
        J.force(False)
