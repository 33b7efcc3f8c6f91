"""Capability: the shortcuts (dispatch/shortcuts.py) give CPU's numbers and step aside whenever
something would act between the Python call and the kernel.

Shortcuts: `F.linear` (the AutogradPrivateUse1 kernel, and ral_mode's direct call), and the
methods `RalTensor.sum()` / `.item()`. Every test runs on both devices and, where a style
matters, both styles (`model.to` and `ral_mode`), against PyTorch CPU: exact (rtol=atol=0)
for sums of integers and `.item()`, rtol=1e-5/atol=1e-5 for float matmuls and sums.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from conftest import assert_close
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import torch_fl
from torch_fl.tensor.serialization import CACHED_TRANSPOSE

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
pytestmark = pytest.mark.parametrize("dev", DEVICES)
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _linear_case(shape, bias=True):
    torch.manual_seed(0)
    lin = torch.nn.Linear(shape[-1], 24, bias=bias)
    return lin, torch.randn(*shape)


def _took_shortcut(weight) -> bool:
    # The shortcut keeps the weight's transpose on the weight (shortcuts._transposed).
    return CACHED_TRANSPOSE in weight.__dict__


@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 16), (2, 2, 3, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_shortcut_matches_cpu_in_both_styles(dev, shape, bias):
    lin, x = _linear_case(shape, bias)
    with torch.no_grad():
        expected = lin(x)
        moved = lin.to(dev)
        got = moved(x.to(dev))
        again = moved(x.to(dev))  # second call: the cached transpose
    assert_close(got, expected, **TOL)
    assert_close(again, expected, **TOL)
    # ATen serves these with one addmm/mm: so does the shortcut
    assert _took_shortcut(moved.weight) == (len(shape) == 2 or bias)
    lin_cpu, _ = _linear_case(shape, bias)
    with torch.no_grad(), torch_fl.ral_mode(dev):
        in_mode = lin_cpu(x)
    assert type(in_mode).__name__ == "RalTensor"
    assert_close(in_mode, expected, **TOL)


def test_cached_transpose_is_not_copied_or_saved(dev, tmp_path):
    lin, x = _linear_case((4, 16))
    moved = _linear_case((4, 16))[0].to(dev)
    with torch.no_grad():
        moved(x.to(dev))
    assert _took_shortcut(moved.weight)
    twin = copy.deepcopy(moved)
    assert not _took_shortcut(twin.weight)
    torch.save(moved.state_dict(), tmp_path / "w.pt")
    loaded = torch.load(tmp_path / "w.pt")
    assert not _took_shortcut(loaded["weight"])
    with torch.no_grad():
        assert_close(twin(x.to(dev)), lin(x), **TOL)
    assert_close(loaded["weight"], lin.weight.detach(), rtol=0, atol=0)


def test_linear_strided_input_takes_pytorchs_path(dev):
    lin, _ = _linear_case((3, 4, 16))
    x = torch.randn(3, 16, 4)
    xt = x.transpose(1, 2)  # (3, 4, 16), not contiguous
    with torch.no_grad():
        expected = lin(xt)
        got = lin.to(dev)(x.to(dev).transpose(1, 2))
    assert_close(got, expected, **TOL)


def test_linear_records_autograd_when_asked(dev):
    lin, x = _linear_case((6, 16))
    x.requires_grad_(True)
    out = lin(x)
    out.square().sum().backward()
    moved = _linear_case((6, 16))[0].to(dev)
    xd = x.detach().to(dev).requires_grad_(True)
    got = moved(xd)
    assert got.grad_fn is not None and not _took_shortcut(moved.weight)
    got.square().sum().backward()
    assert_close(got, out.detach(), **TOL)
    assert_close(xd.grad, x.grad, **TOL)
    assert_close(moved.weight.grad, lin.weight.grad, rtol=1e-4, atol=1e-4)
    assert_close(moved.bias.grad, lin.bias.grad, rtol=1e-4, atol=1e-4)


def test_forward_mode_ad_keeps_its_tangent(dev):
    # Every operand has a tangent (requires_grad stays False on dual tensors): the shortcuts
    # must step aside or the output's tangent would be lost.
    primals = [torch.randn(4, 16), torch.randn(8, 16), torch.randn(8)]
    tangents = [torch.randn_like(p) for p in primals]

    def run(device):
        with fwAD.dual_level():
            duals = [fwAD.make_dual(p.to(device), t.to(device)) for p, t in zip(primals, tangents)]
            out = fwAD.unpack_dual(F.linear(*duals))
            total = fwAD.unpack_dual(duals[0].sum())
            return out.primal, out.tangent, total.tangent

    for got, expected in zip(run(dev), run("cpu")):
        assert got is not None
        assert_close(got, expected, **TOL)


def test_cached_transpose_follows_the_weight(dev):
    lin, x = _linear_case((4, 16))
    moved = _linear_case((4, 16))[0].to(dev)
    xd = x.to(dev)
    with torch.no_grad():
        moved(xd)
        moved.weight.mul_(2)  # in place: the cached transpose shares the buffer
        lin.weight.mul_(2)
        assert_close(moved(xd), lin(x), **TOL)
        new = torch.randn(24, 16)
        moved.weight.data = new.to(dev)  # a new buffer: the cache must not serve the old one
        lin.weight.data = new.clone()
        moved.weight.abs()  # routing an op on the weight gives it a fresh signature first
        assert_close(moved(xd), lin(x), **TOL)
        moved.load_state_dict({k: v * 3 for k, v in lin.state_dict().items()})
        assert_close(moved(xd), F.linear(x, lin.weight * 3, lin.bias * 3), **TOL)
        moved.weight.requires_grad_(False).resize_(24, 8)  # in-place geometry: a new signature
        lin.weight.data = lin.weight.data.reshape(-1)[: 24 * 8].reshape(24, 8) * 3
        assert_close(moved(xd[:, :8]), F.linear(x[:, :8], lin.weight, lin.bias * 3), **TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64, torch.bool])
def test_sum_and_item_methods_match_cpu(dev, dtype):
    x = (torch.randn(7, 5) * 4).to(dtype)
    xd = x.to(dev)
    got, expected = xd.sum(), x.sum()
    assert got.dtype == expected.dtype  # integer and bool sums promote to int64, as on CPU
    exact = dtype != torch.float32
    assert_close(got, expected, rtol=0 if exact else 1e-5, atol=0 if exact else 1e-5)
    assert got.item() == pytest.approx(expected.item(), rel=0 if exact else 1e-5)
    assert type(got.item()) is type(expected.item())
    assert xd[2, 3].item() == x[2, 3].item()
    with pytest.raises(RuntimeError, match="a Tensor with 35 elements cannot be converted to Scalar"):
        xd.item()


def test_sum_keeps_its_arguments_and_autograd(dev):
    x = torch.randn(4, 6)
    xd = x.to(dev)
    assert_close(xd.sum(1), x.sum(1), **TOL)
    assert_close(xd.sum(dim=0, keepdim=True), x.sum(dim=0, keepdim=True), **TOL)
    assert_close(xd.sum(dtype=torch.float64), x.sum(dtype=torch.float64), **TOL)
    leaf = xd.clone().requires_grad_(True)
    total = leaf.sum()
    assert total.grad_fn is not None  # recorded: the shortcut stepped aside
    (total * 2).backward()
    assert_close(leaf.grad, torch.full((4, 6), 2.0), rtol=0, atol=0)
    with torch.no_grad():
        assert leaf.sum().grad_fn is None


def test_user_modes_still_see_every_call(dev):
    xd, w = torch.randn(3, 8).to(dev), torch.randn(4, 8).to(dev)

    class SeenAten(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func)
            return func(*args, **(kwargs or {}))

    class SeenFunctions(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.funcs = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.funcs.append(func)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), SeenAten() as aten_mode:
        out = F.linear(xd, w).sum()
        value = out.item()
    ops = {str(op) for op in aten_mode.ops}
    assert {"aten.t.default", "aten.mm.default", "aten.sum.default", "aten._local_scalar_dense.default"} <= ops
    with torch.no_grad(), SeenFunctions() as fn_mode:
        out2 = F.linear(xd, w).sum()
        value2 = out2.item()
    assert {F.linear, torch.Tensor.sum, torch.Tensor.item} <= set(fn_mode.funcs)
    expected = F.linear(xd.cpu(), w.cpu()).sum().item()
    assert value == pytest.approx(expected, rel=1e-5) and value2 == pytest.approx(expected, rel=1e-5)


def test_autocast_takes_pytorchs_path(dev):
    if not torch.ral.is_bf16_supported(dev):
        pytest.skip(f"{dev} has no bfloat16 kernels")
    lin, x = _linear_case((4, 16))
    moved = _linear_case((4, 16))[0].to(dev)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        expected = lin(x)
    with torch.autocast("ral", dtype=torch.bfloat16), torch.no_grad():
        got = moved(x.to(dev))
        total = got.float().sum()
    assert got.dtype == expected.dtype == torch.bfloat16
    assert_close(got, expected, rtol=2e-2, atol=2e-2)
    assert total.item() == pytest.approx(expected.float().sum().item(), rel=2e-2, abs=0.1)


def test_ral_mode_shortcuts_follow_cpu_updates(dev):
    lin, x = _linear_case((5, 16))
    ref = _linear_case((5, 16))[0]
    with torch.no_grad():
        for _ in range(3):
            with torch_fl.ral_mode(dev):
                got = F.linear(x, lin.weight, bias=lin.bias).sum().item()
            assert got == pytest.approx(ref(x).sum().item(), rel=1e-4, abs=1e-4)
            lin.weight.add_(0.5)  # a CPU update between steps: the cached twin must follow
            ref.weight.add_(0.5)


def test_observers_see_shortcut_calls(dev):
    xd = torch.randn(4, 4).to(dev)
    with torch_fl.coverage() as cov:
        value = xd.sum().item()
    assert cov.counts[("aten::sum", "vendor")] == 1
    assert value == pytest.approx(xd.cpu().sum().item(), rel=1e-5)


def test_inference_mode_and_compile_agree(dev):
    lin, x = _linear_case((3, 16))
    moved = _linear_case((3, 16))[0].to(dev)
    with torch.inference_mode():
        assert_close(moved(x.to(dev)), lin(x).detach(), **TOL)

    def step(m, inp):
        return m(inp).sum()

    compiled = torch.compile(step, backend="eager", fullgraph=True)
    with torch.no_grad():
        assert_close(compiled(moved, x.to(dev)), lin(x).sum(), **TOL)


def test_jit_trace_records_the_shortcut_calls(dev):
    lin, x = _linear_case((3, 16))

    class Head(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, inp):
            return self.inner(inp).sum()

    moved = Head(_linear_case((3, 16))[0].to(dev))
    with torch.no_grad():
        traced = torch.jit.trace(moved, (x.to(dev),))
        graph = str(traced.inlined_graph)
        assert "aten::linear" in graph and "aten::sum" in graph
        x2 = torch.randn(3, 16)
        assert_close(traced(x2.to(dev)), lin(x2).sum(), **TOL)


_BINARY_CALLS = {
    "torch.add": torch.add,
    "torch.sub": torch.sub,
    "torch.mul": torch.mul,
    "torch.div": torch.div,
    "Tensor.add": torch.Tensor.add,
    "Tensor.mul": torch.Tensor.mul,
    "a + b": lambda a, b: a + b,
    "a - b": lambda a, b: a - b,
    "a * b": lambda a, b: a * b,
    "a / b": lambda a, b: a / b,
}
_OPERANDS = {
    "f32": (torch.randn(4, 5), torch.randn(4, 5)),
    "broadcast": (torch.randn(4, 1), torch.randn(1, 5)),
    "zero-dim": (torch.randn(()), torch.randn(4, 5)),
    "int64 / float32": (torch.arange(20).reshape(4, 5), torch.randn(4, 5)),
    "int32 / int64": (torch.arange(1, 21, dtype=torch.int32).reshape(4, 5), torch.arange(3, 23).reshape(4, 5)),
    "float64 / bool": (torch.randn(4, 5, dtype=torch.float64), torch.rand(4, 5) > 0.5),
}


@pytest.mark.parametrize("call", list(_BINARY_CALLS))
@pytest.mark.parametrize("operands", list(_OPERANDS))
def test_binary_shortcuts_match_cpu_in_both_styles(dev, call, operands):
    fn, (a, b) = _BINARY_CALLS[call], _OPERANDS[operands]
    try:
        expected = fn(a, b)
    except RuntimeError as refused:  # e.g. float - bool: the same error, in both styles
        for attempt in (lambda: fn(a.to(dev), b.to(dev)), lambda: _in_mode(dev, fn, a, b)):
            with pytest.raises(RuntimeError, match=re.escape(str(refused))):
                attempt()
        return
    got = fn(a.to(dev), b.to(dev))
    assert got.dtype == expected.dtype and got.shape == expected.shape  # promotion, broadcasting
    assert_close(got, expected, rtol=1e-6, atol=1e-6)
    assert_close(_in_mode(dev, fn, a, b), expected, rtol=1e-6, atol=1e-6)


def _in_mode(dev, fn, *args):
    with torch_fl.ral_mode(dev):
        return fn(*args)


def test_binary_shortcuts_step_aside(dev):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    ad, bd = a.to(dev), b.to(dev)
    assert_close(torch.add(ad, bd, alpha=2), torch.add(a, b, alpha=2), rtol=1e-6, atol=1e-6)  # a keyword
    assert_close(ad * 0.5 + 2, a * 0.5 + 2, rtol=1e-6, atol=1e-6)  # Python scalars
    out = torch.empty(3, 4).to(dev)
    torch.mul(ad, bd, out=out)
    assert_close(out, a * b, rtol=1e-6, atol=1e-6)
    bool_a = (a > 0).to(dev)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
        bool_a - bool_a
    leaf = ad.clone().requires_grad_(True)
    prod = leaf * bd + bd * leaf  # the tensor that requires grad on either side
    assert prod.grad_fn is not None  # recorded: the shortcut stepped aside
    prod.sum().backward()
    assert_close(leaf.grad, 2 * b, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs two ral devices (host plugin and OpenCL on PoCL)")
def test_binary_shortcut_keeps_the_device_mismatch_error(dev):
    other = DEVICES[1] if dev == DEVICES[0] else DEVICES[0]
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.randn(3).to(dev) + torch.randn(3).to(other)


def test_complex_operands_match_cpu(dev):
    # Lazy conjugate/negative views are RalMathViews, which the shortcuts decline: the
    # Conjugate and Negative fallbacks they would skip resolve the bits, so sum, item and
    # products stay exact.
    z, w = torch.randn(4, dtype=torch.complex64), torch.randn(4, dtype=torch.complex64)
    zd, wd = z.to(dev), w.to(dev)
    assert zd.conj().is_conj() and torch._neg_view(zd).is_neg()
    assert_close(zd.conj().sum(), z.conj().sum(), **TOL)
    assert zd.conj()[1].item() == pytest.approx(z.conj()[1].item(), rel=1e-6)
    assert_close(zd.conj() * wd, z.conj() * w, **TOL)
    assert_close(torch._neg_view(zd) + wd, torch._neg_view(z) + w, **TOL)


_SCALAR_CALLS = {
    "a * s": lambda a, s: a * s,
    "s * a": lambda a, s: s * a,
    "a + s": lambda a, s: a + s,
    "s + a": lambda a, s: s + a,
    "a - s": lambda a, s: a - s,
    "a / s": lambda a, s: a / s,
    "torch.mul": torch.mul,
    "Tensor.add": torch.Tensor.add,
}
_SCALAR_TENSORS = {
    "f32": torch.randn(4, 5),
    "f64": torch.randn(4, 5, dtype=torch.float64),
    "f16": torch.randn(4, 5).half(),
    "bf16": torch.randn(4, 5).bfloat16(),
    "int64": torch.arange(-10, 10).reshape(4, 5),
    "int32": torch.arange(-10, 10, dtype=torch.int32).reshape(4, 5),
    "uint8": torch.arange(20, dtype=torch.uint8).reshape(4, 5),
    "bool": torch.arange(20).reshape(4, 5) % 3 == 0,
}
_SCALARS = [0.5, -3, 7, 1e-3, float("inf"), 2**40, True]


def _dispatch_entries(monkeypatch):
    """A counter of calls that reach RalTensor.__torch_dispatch__ through PyTorch's dispatcher
    (a shortcut calls the router without that trip)."""
    from torch_fl.tensor.ral_tensor import RalTensor

    seen = []
    real = RalTensor.__torch_dispatch__.__func__

    def counting(cls, func, types, args=(), kwargs=None):
        seen.append(func)
        return real(cls, func, types, args, kwargs)

    monkeypatch.setattr(RalTensor, "__torch_dispatch__", classmethod(counting))
    return seen


@pytest.mark.parametrize("call", list(_SCALAR_CALLS))
@pytest.mark.parametrize("kind", list(_SCALAR_TENSORS))
def test_number_operand_shortcuts_match_cpu_in_both_styles(dev, call, kind):
    fn, a = _SCALAR_CALLS[call], _SCALAR_TENSORS[kind]
    for s in _SCALARS:
        try:
            expected = fn(a, s)
        except RuntimeError as refused:  # e.g. bool - True: the same error on the device
            with pytest.raises(RuntimeError, match=re.escape(str(refused))):
                fn(a.to(dev), s)
            continue
        for got in (fn(a.to(dev), s), _in_mode(dev, fn, a, s)):
            assert got.dtype == expected.dtype, (s, got.dtype, expected.dtype)  # wrapped-number promotion
            # one rounding of the same operation: exact, but for 16-bit results within one ulp
            tol = {"rtol": 1e-2, "atol": 1e-2} if expected.dtype in (torch.float16, torch.bfloat16) else {}
            assert got.device.type == "ral"
            torch.testing.assert_close(got.cpu(), expected, **(tol or {"rtol": 0, "atol": 0}), equal_nan=True)


def test_number_operands_take_the_shortcut(dev, monkeypatch):
    x = torch.randn(3, 4)
    xd = x.to(dev)
    seen = _dispatch_entries(monkeypatch)
    with torch.no_grad():
        got = [xd * 0.5, 0.5 * xd, xd + 1, 1.0 + xd, xd - 2, xd / 4, xd.mul(3)]  # torch.mul: in ral_mode only
    assert seen == [], f"went through PyTorch's dispatcher: {seen}"
    for g, e in zip(got, [x * 0.5, 0.5 * x, x + 1, 1.0 + x, x - 2, x / 4, x.mul(3)]):
        assert_close(g, e, rtol=0, atol=0)
    # numbers the router does not key (bool, complex, beyond int64) take PyTorch's path
    assert_close(xd * True, x * True, rtol=0, atol=0)
    assert_close(xd * 2j, x * 2j, rtol=1e-6, atol=1e-6)
    with pytest.raises(OverflowError, match="too big"):  # as CPU's `x * 2**70`
        xd * 2**70
    assert seen, "bool/complex/huge numbers should have taken PyTorch's path"


def test_number_operand_shortcut_steps_aside_for_autograd(dev):
    leaf = torch.randn(3, 4).to(dev).requires_grad_(True)
    y = 0.5 * leaf + 1.0
    assert y.grad_fn is not None
    y.sum().backward()
    assert_close(leaf.grad, torch.full((3, 4), 0.5), rtol=0, atol=0)
