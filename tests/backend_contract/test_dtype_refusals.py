"""Dtypes CPU's kernels refuse, or accept, where PyTorch's meta functions (which the router
plans from) decide otherwise: each call raises CPU's exception with CPU's message, or returns
CPU's values. Found by running every pairing of 9 dtypes through 60 ops on CPU and on ral:
float32 @ float64 products ran on ral:1 or failed inside a plugin with its own words, integer
lerp and prelu, complex mse_loss, bool dot/mv and heaviside of two dtypes ran where CPU
raises, as did bool abs/rounding/relu and integer softmax; a uint8 `where` condition and uint8 nll_loss targets (which CPU accepts) raised.
Integer gelu/silu/hardswish/glu/huber/upsampling/adaptive pooling and bool threshold/padding/addcmul
ran where CPU's kernels refuse the dtype, and integer layer/batch norm raised other errors.
Both devices, both styles (dispatch/dtype_checks.py, dispatch/uint8_operands.py)."""

import subprocess
import sys

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
F = torch.nn.functional
MIXES = [
    (torch.float32, torch.float64),
    (torch.float64, torch.float32),
    (torch.float32, torch.float16),
    (torch.bfloat16, torch.float32),
    (torch.float32, torch.complex64),
    (torch.complex64, torch.float32),
    (torch.int64, torch.float32),
    (torch.int32, torch.int64),
    (torch.uint8, torch.float32),
    (torch.bool, torch.float32),
    (torch.float32, torch.bool),
]


def _mk(dev, dtype, *shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) * 3).to(dtype).to(dev)


def _product_calls(dev, d1, d2):
    """Matrix products with operands of dtypes d1 and d2 (and each alone)."""

    def mk(dtype, *shape):
        return _mk(dev, dtype, *shape)

    return [
        lambda: torch.mm(mk(d1, 2, 3), mk(d2, 3, 2)),
        lambda: torch.matmul(mk(d1, 2, 3), mk(d2, 3, 2)),
        lambda: F.linear(mk(d1, 2, 3), mk(d2, 4, 3)),
        lambda: F.linear(mk(d1, 2, 3), mk(d1, 4, 3), mk(d2, 4)),
        lambda: torch.addmm(mk(d1, 2, 2), mk(d1, 2, 3), mk(d2, 3, 2)),
        lambda: torch.addmm(mk(d2, 2, 2), mk(d1, 2, 3), mk(d1, 3, 2)),
        lambda: torch.addmm(mk(d1, 2, 2), mk(d2, 2, 3), mk(d1, 3, 2)),
        lambda: mk(d1, 2, 2).addmm_(mk(d1, 2, 3), mk(d2, 3, 2)),
        lambda: torch.bmm(mk(d1, 1, 2, 3), mk(d2, 1, 3, 2)),
        lambda: torch.baddbmm(mk(d1, 1, 2, 2), mk(d1, 1, 2, 3), mk(d2, 1, 3, 2)),
        lambda: torch.baddbmm(mk(d2, 1, 2, 2), mk(d1, 1, 2, 3), mk(d1, 1, 3, 2)),
        lambda: torch.mv(mk(d1, 2, 3), mk(d2, 3)),
        lambda: torch.addmv(mk(d1, 2), mk(d1, 2, 3), mk(d2, 3)),
        lambda: torch.dot(mk(d1, 3), mk(d2, 3)),
        lambda: torch.vdot(mk(d1, 3), mk(d2, 3)),
        lambda: torch.mm(mk(d1, 2, 3), mk(d1, 3, 2)),
        lambda: torch.mv(mk(d1, 2, 3), mk(d1, 3)),
        lambda: torch.dot(mk(d1, 3), mk(d1, 3)),
        lambda: torch.bmm(mk(d1, 1, 2, 3), mk(d1, 1, 3, 2)),
    ]


def _pointwise_calls(dev, d1, d2):
    """heaviside, lerp, prelu and mse_loss over dtypes d1 and d2."""

    def mk(dtype, *shape, seed=0):
        return _mk(dev, dtype, *shape, seed=seed)

    return [
        lambda: torch.heaviside(mk(d1, 4) - 1, mk(d2, 4)),
        lambda: (mk(d1, 4) - 1).heaviside_(mk(d2, 4)),
        lambda: torch.heaviside(mk(d1, 4), mk(d1, 4, seed=1)),
        lambda: torch.lerp(mk(d1, 4), mk(d2, 4, seed=1), 0.25),
        lambda: torch.lerp(mk(d1, 4), mk(d1, 4, seed=1), mk(d2, 4)),
        lambda: torch.lerp(mk(d1, 4), mk(d1, 4, seed=1), mk(d1, 4)),
        lambda: mk(d1, 4).lerp_(mk(d1, 4, seed=1), 0.5),
        lambda: F.prelu(mk(d1, 2, 3), mk(d1, 1)),
        lambda: F.prelu(mk(d1, 2, 3), mk(d2, 1)),
        lambda: F.mse_loss(mk(d1, 3), mk(d2, 3, seed=1)),
        lambda: F.mse_loss(mk(d1, 3), mk(d1, 3, seed=1), reduction="sum"),
    ]


def _calls(dev):
    return [c for d1, d2 in MIXES for c in (*_product_calls(dev, d1, d2), *_pointwise_calls(dev, d1, d2))]


def _styled_outcomes(make, device, style):
    """outcomes of make(device) (`.to` style), or of make("cpu") inside ral_mode(device)."""
    if style == "to":
        return outcomes(make(device))
    with torch_fl.ral_mode(device):
        return outcomes(make("cpu"))


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_dtype_refusals_match_cpu(device, style):
    expected = outcomes(_calls("cpu"))
    raised = {k for k, _ in expected if k != "value"}
    assert raised == {RuntimeError, NotImplementedError}  # both kinds of refusal are covered
    assert sum(k == "value" for k, _ in expected) > 50  # and many calls that run
    got = _styled_outcomes(_calls, device, style)
    check_outcomes(got, expected, rtol=1e-2, atol=1e-2)  # float16/bfloat16 products included


def _unary_calls(dev):
    """Rounding, abs, relu and softmax over bool, integer and float inputs."""
    calls = []
    for dtype in (torch.bool, torch.int64, torch.uint8, torch.int8, torch.float32):
        x = (torch.tensor([[1, 0, 3], [-2, 1, 2]]) * 1.5).to(dtype).to(dev)
        calls += [
            lambda x=x: x.abs(),
            lambda x=x: x.clone().abs_(),
            lambda x=x: torch.abs(x, out=torch.empty_like(x)),
            lambda x=x: x.ceil(),
            lambda x=x: x.floor(),
            lambda x=x: x.round(),
            lambda x=x: x.round(decimals=1),
            lambda x=x: x.trunc(),
            lambda x=x: x.clone().trunc_(),
            lambda x=x: x.fix(),
            lambda x=x: x.relu(),
            lambda x=x: F.relu(x.clone(), inplace=True),
            lambda x=x: x.softmax(1),
            lambda x=x: x.softmax(0),
            lambda x=x: x.log_softmax(-1),
            lambda x=x: x.log_softmax(0),
            lambda x=x: x[0].softmax(0),
            lambda x=x: x.softmax(1, dtype=torch.float32),
        ]
    return calls


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_unary_dtype_refusals_match_cpu(device, style):
    expected = outcomes(_unary_calls("cpu"))
    assert sum(k is NotImplementedError for k, _ in expected) > 20
    check_outcomes(_styled_outcomes(_unary_calls, device, style), expected, rtol=1e-5, atol=1e-6)


def _where_calls(dev):
    x = torch.arange(-2.0, 4.0, device=dev)
    calls = []
    for dtype in (torch.uint8, torch.bool, torch.int8, torch.int64, torch.float32):
        c = (torch.tensor([1, 0, 2, 0, 1, 3]) % 2).to(dtype).to(dev)
        calls += [
            lambda c=c: torch.where(c, x, -x),
            lambda c=c: torch.where(c, x, 0.5),
            lambda c=c: torch.where(c, 2.0, x),
            lambda c=c: torch.where(c, 1.0, 0.0),
            lambda c=c: x.where(c, x * 3),
            lambda c=c: torch.where(c, x, -x, out=torch.empty(6, device=dev)),
        ]
    return calls


def _nll_calls(dev):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 4, generator=g).to(dev)
    logits4 = torch.randn(2, 4, 3, 3, generator=g).to(dev)
    calls = []
    for dtype in (torch.uint8, torch.int64, torch.int32, torch.int16, torch.bool):
        t = torch.tensor([0, 3, 1, 2, 3]).to(dtype).to(dev)
        t4 = torch.randint(0, 4, (2, 3, 3), generator=g).to(dtype).to(dev)

        def grad(loss_fn, x=logits, t=t):
            xg = x.detach().requires_grad_()
            loss = loss_fn(xg, t)
            return torch.cat([loss.detach().reshape(1), torch.autograd.grad(loss, xg)[0].flatten()])

        calls += [
            lambda grad=grad: grad(lambda x, tgt: F.nll_loss(x.log_softmax(1), tgt)),
            lambda grad=grad: grad(lambda x, tgt: F.cross_entropy(x, tgt, reduction="sum")),
            lambda grad=grad: grad(lambda x, tgt: F.cross_entropy(x, tgt, label_smoothing=0.1)),
            lambda grad=grad: grad(
                lambda x, tgt: F.cross_entropy(x, tgt, weight=torch.arange(1.0, 5.0, device=x.device))
            ),
            lambda grad=grad, t4=t4: grad(lambda x, tgt: F.cross_entropy(x, tgt), logits4, t4),
        ]
    return calls


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_uint8_conditions_and_targets_run_as_on_cpu(device, style):
    for make in (_where_calls, _nll_calls):
        expected = outcomes(make("cpu"))
        values = sum(k == "value" for k, _ in expected)
        assert 0 < values < len(expected)  # uint8 and bool run, the other dtypes are refused
        check_outcomes(_styled_outcomes(make, device, style), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_uint8_where_warns_once_as_cpu(device):
    # ATen warns once per process: a fresh one, CPU's call first would use up CPU's warning
    code = f"""
import warnings, torch, torch_fl
c = torch.tensor([1, 0], dtype=torch.uint8, device="{device}")
x = torch.ones(2, device="{device}")
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    torch.where(c, x, -x)
    torch.where(c, x, -x)
print([str(m.message) for m in w if "uint8 condition" in str(m.message)])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = eval(out.stdout.strip().splitlines()[-1])
    assert len(got) == 1 and got[0].startswith("where received a uint8 condition tensor. This behavior is deprecated")


def _kernel_dtype_calls(dev):
    """Activations, losses, padding, upsampling, pooling and norms whose CPU kernels take
    fewer dtypes than PyTorch's meta functions, over integer, bool, complex and float inputs."""
    calls = []
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64, torch.float16, torch.float32):
        x = (torch.tensor([[1, 0, 3, 2], [2, 1, 0, 3]]) * 0.75).to(dtype).to(dev)
        calls += [
            lambda x=x: F.gelu(x),
            lambda x=x: F.gelu(x, approximate="tanh"),
            lambda x=x: F.silu(x),
            lambda x=x: F.hardswish(x),
            lambda x=x: F.hardsigmoid(x),
            lambda x=x: F.leaky_relu(x),
            lambda x=x: F.celu(x),
            lambda x=x: F.glu(x, -1),
            lambda x=x: F.huber_loss(x, x.flip(0)),
            lambda x=x: F.smooth_l1_loss(x, x.flip(0)),
            # the kernel's dtype is the operands' common one; huber writes into x's dtype
            lambda x=x: F.huber_loss(x, x.flip(0).float()),
            lambda x=x: F.huber_loss(x.float(), x.flip(0)),
            lambda x=x: F.smooth_l1_loss(x, x.flip(0).to(torch.float64), reduction="none"),
            lambda x=x: torch.addcmul(x, x.float(), x.float()),
            lambda x=x: torch.addcmul(x.float(), x, x),
            lambda x=x: F.threshold(x, 1, 2),
            lambda x=x: torch.addcmul(x, x, x),
            lambda x=x: torch.aminmax(x),
            lambda x=x: F.pad(x[None], (1, 1), mode="reflect"),
            lambda x=x: F.pad(x[None, None], (1, 1, 1, 1), mode="reflect"),
            lambda x=x: F.interpolate(x[None], scale_factor=2),
            lambda x=x: F.interpolate(x[None], scale_factor=2, mode="nearest-exact"),
            lambda x=x: F.interpolate(x[None, None], scale_factor=2),
            lambda x=x: F.interpolate(x[None, None, None], scale_factor=2),
            lambda x=x: F.interpolate(x[None, None], scale_factor=2, mode="bicubic"),
            lambda x=x: F.adaptive_avg_pool1d(x[None], 2),
            lambda x=x: F.adaptive_max_pool2d(x[None], 2),
            lambda x=x: F.avg_pool2d(x[None], (1, 2)),
            lambda x=x: F.avg_pool3d(x[None, None], (1, 1, 2)),
            lambda x=x: F.max_unpool2d(x[None, None], torch.tensor([[[[0, 2, 5, 7], [8, 10, 13, 15]]]], device=dev), 2),
            lambda x=x: F.adaptive_max_pool3d(x[None, None], 2),
            lambda x=x: F.nll_loss(x[:, :3], torch.tensor([0, 2], device=dev)),
            lambda x=x: F.nll_loss(x.reshape(1, 2, 2, 2), torch.tensor([[[0, 1], [1, 0]]], device=dev)),
            lambda x=x: torch.ops.aten.max_pool2d_with_indices_backward(
                x[None, :, :2],
                x[None],
                [1, 2],
                [1, 2],
                [0, 0],
                [1, 1],
                False,
                torch.tensor([[[0, 2], [5, 7]]], device=dev),
            ),
            lambda x=x: F.layer_norm(x, (4,)),
            lambda x=x: F.batch_norm(x, None, None, training=True),
        ]
    return calls


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_kernel_dtype_refusals_match_cpu(device, style):
    expected = outcomes(_kernel_dtype_calls("cpu"))
    assert sum(k is NotImplementedError for k, _ in expected) > 90
    assert sum(k == "value" for k, _ in expected) > 50
    # Run as on CUDA where CPU's kernel refuses: avg_pool3d in float16, max_unpool2d over integers
    cuda_like = (
        "avg_pool3d_out_frame\" not implemented for 'Half'",
        *(f"max_unpool2d\" not implemented for '{n}'" for n in ("Long", "Int", "Byte")),
    )
    cpu_only = {i for i, (k, v) in enumerate(expected) if k is NotImplementedError and v.endswith(cuda_like)}
    assert len(cpu_only) == len(cuda_like)
    got = _styled_outcomes(_kernel_dtype_calls, device, style)
    assert all(got[i][0] == "value" for i in cpu_only)
    keep = [i for i in range(len(expected)) if i not in cpu_only]
    check_outcomes([got[i] for i in keep], [expected[i] for i in keep], rtol=1e-2, atol=1e-2)


def test_check_tables_name_real_overloads():
    """Every op the argument, dtype, shape and value check tables key names an aten overload
    (a misspelled key never matches a call, and its check never runs)."""
    from torch_fl.dispatch.argument_checks import CHECKS
    from torch_fl.dispatch.dtype_checks import KERNEL_DTYPE_CHECKS
    from torch_fl.dispatch.value_checks import VALUE_CHECKS

    assert len(CHECKS) > 200 and len(VALUE_CHECKS) > 15 and len(KERNEL_DTYPE_CHECKS) > 80
    for name in (*CHECKS, *VALUE_CHECKS, *KERNEL_DTYPE_CHECKS):
        base, _, overload = name.removeprefix("aten::").partition(".")
        assert hasattr(getattr(torch.ops.aten, base), overload or "default"), name


def _random_dtype_calls(dev):
    """bernoulli with an integer, bool or complex probability tensor and normal with a complex
    std (CPU refuses; ral drew numbers), and the same calls with float operands, which run."""
    calls = []
    for dtype in (torch.int64, torch.bool, torch.complex64, torch.float32):
        p = torch.tensor([0.0, 1.0, 1.0]).to(dtype).to(dev)
        ones = torch.ones(3, device=dev)
        calls += [
            lambda p=p: torch.bernoulli(p),
            lambda p=p, ones=ones: ones.clone().bernoulli_(p),
            lambda p=p: torch.normal(torch.zeros(3, device=dev), p),
            lambda p=p: torch.normal(0.0, p),
            lambda p=p: torch.normal(p, 1.0),
        ]
    return calls


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_random_op_dtype_refusals_match_cpu(device, style):
    expected = outcomes(_random_dtype_calls("cpu"))
    got = _styled_outcomes(_random_dtype_calls, device, style)
    assert sum(k != "value" for k, _ in expected) == 12
    check_outcomes(got, expected, values=False)  # random draws: the dtype and shape, not the values
