"""Matrix products on oneDNN's matmul primitive (plugins/common/dnnl_matmul.c): 16-bit ones on
ral:0's host plugin and on ral:1's host path on PoCL, and ral:1's float32 ones above its inline
size.

Values, in process, on both devices and in both styles (`.to` and `ral_mode`): bfloat16,
float16 and float32 `mm`, `addmm` (bias rows, beta/alpha, beta = 0 ignoring NaN in self, in place),
`bmm`/`baddbmm` and `nn.Linear` forward and backward, over the layouts a user's tensors take
(transposed, row slices with a leading dimension past the row, offsets, size-1 dims, permuted
batches, expanded operands). Each result must equal the float32 product of the same inputs
rounded once into the result's type: within half a unit in the last place (rtol 0.51 * eps) plus
1e-5 * sqrt(K) for the float32 accumulation order. A result rounded twice (the product, then
the bias sum) misses that by up to a whole unit. And each must match PyTorch's CPU result
(half types: rtol 2 * eps, atol 2 * eps * sqrt(K); float32: rtol 1.3e-6, atol 1e-5 * sqrt(K)).

Which path ran, in a child process with `ONEDNN_VERBOSE=1`: on a CPU with native bfloat16
(AVX512-BF16/AMX) bfloat16 products run oneDNN 2.x matmul primitives in bfloat16, not reference
code; a large float32 product on ral:1 runs one in float32 and a small one none (the inline
GEMM); with `TORCH_FL_HOST_DNNL=0` / `TORCH_FL_OPENCL_DNNL=0` none runs and values still match.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from conftest import dnnl_loads, native_bf16, plugin_device, run_python

import torch_fl

PLUGINS = ["host", "opencl"]
HALVES = [torch.bfloat16, torch.float16]
# float32 too: ral:1 runs its products above the inline size on oneDNN (and ral:0 on OpenBLAS)
DTYPES = [*HALVES, torch.float32]


def _check(got, a, b, self=None, beta=1.0, alpha=1.0):
    """got == round(beta * self + alpha * a @ b) in float32, and close to CPU's own result."""
    dt = a.dtype
    assert got.dtype == dt and got.device.type == "cpu"
    k = a.shape[-1]
    ref = alpha * torch.matmul(a.float(), b.float())
    if self is not None and beta != 0:
        ref = ref + beta * self.float()
    eps = torch.finfo(dt).eps
    torch.testing.assert_close(got.float(), ref, rtol=0.51 * eps, atol=1e-5 * math.sqrt(k))
    if self is None:
        cpu = torch.matmul(a, b)
    elif a.dim() == 2:
        cpu = torch.addmm(self, a, b, beta=beta, alpha=alpha)
    else:
        cpu = torch.baddbmm(self, a, b, beta=beta, alpha=alpha)
    # against CPU: the half types within two of their ulps; float32 within its accumulation order
    rtol, atol = (1.3e-6, 1e-5 * math.sqrt(k)) if dt == torch.float32 else (2 * eps, 2 * eps * math.sqrt(k))
    torch.testing.assert_close(got, cpu, rtol=rtol, atol=atol, equal_nan=True)


def _run(style, dev, fn, *args):
    """fn(*args) on the device: its tensors moved (`to`) or CPU tensors inside ral_mode."""
    if style == "to":
        out = fn(*(x.to(dev) if isinstance(x, torch.Tensor) else x for x in args))
        assert out.device == torch.device(dev)
        return out.cpu()
    with torch_fl.ral_mode(dev):
        out = fn(*args)
    return out.cpu()


def _layouts(dt, m, k, n, gen):
    """(label, a, b) pairs of one product in the layouts users' tensors take."""
    r = lambda *s: torch.randn(*s, generator=gen).to(dt)  # noqa: E731
    wide_a, wide_b = r(m + 2, k + 5), r(k + 1, n + 3)
    return [
        ("contiguous", r(m, k), r(k, n)),
        ("b_transposed", r(m, k), r(n, k).t()),
        ("a_transposed", r(k, m).t(), r(k, n)),
        ("row_slices", wide_a[1 : m + 1, 2 : k + 2], wide_b[1:, 3:]),
    ]


SHAPES = [(128, 256, 96), (5, 7, 3), (1, 64, 33), (17, 40, 1), (9, 1, 12)]


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("style", ["to", "mode"])
def test_mm_in_every_layout_rounds_once_and_matches_cpu(plugin, dt, style):
    dev = plugin_device(plugin)
    gen = torch.Generator().manual_seed(0)
    for m, k, n in SHAPES:
        for _label, a, b in _layouts(dt, m, k, n, gen):
            _check(_run(style, dev, torch.mm, a, b), a, b)
            _check(_run(style, dev, torch.matmul, a, b), a, b)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("style", ["to", "mode"])
def test_addmm_adds_before_the_one_rounding(plugin, dt, style):
    """Bias rows (nn.Linear's), full addends, beta/alpha, beta = 0 with NaN in self."""
    dev = plugin_device(plugin)
    gen = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=gen).to(dt)  # noqa: E731
    for m, k, n in SHAPES:
        for label, a, b in _layouts(dt, m, k, n, gen):
            for self, beta, alpha in (
                (r(n), 1.0, 1.0),
                (r(1, n), 0.5, 2.0),
                (r(m, n), 1.0, -1.5),
                (r(m, 1), 2.0, 1.0),
                (torch.full((m, n), float("nan"), dtype=dt), 0.0, 1.0),
            ):
                got = _run(style, dev, functools.partial(torch.addmm, beta=beta, alpha=alpha), self, a, b)
                _check(got, a, b, self.expand(m, n), beta, alpha)
                assert not got.isnan().any(), (label, "beta = 0 must ignore self")


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_in_place_addmm_and_out(plugin, dt):
    """addmm_ (self is the output: no copy of the addend) and mm(out=) on device tensors."""
    dev = plugin_device(plugin)
    gen = torch.Generator().manual_seed(2)
    a, b, c = (torch.randn(s, generator=gen).to(dt) for s in ((33, 64), (64, 20), (33, 20)))
    acc = c.to(dev)
    acc.addmm_(a.to(dev), b.to(dev), beta=0.75, alpha=1.25)
    _check(acc.cpu(), a, b, c, 0.75, 1.25)
    out = torch.empty(33, 20, dtype=dt, device=dev)
    torch.mm(a.to(dev), b.to(dev), out=out)
    _check(out.cpu(), a, b)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("style", ["to", "mode"])
def test_batched_products_in_permuted_and_expanded_layouts(plugin, dt, style):
    """bmm/baddbmm of contiguous, batch-permuted (attention's [B, H] transposes) and expanded
    (stride 0: not a oneDNN memory, the plugin's own GEMM) operands."""
    dev = plugin_device(plugin)
    gen = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=gen).to(dt)  # noqa: E731
    cases = [
        ("contiguous", r(4, 16, 32), r(4, 32, 8)),
        ("permuted", r(16, 4, 32).transpose(0, 1), r(32, 4, 8).permute(1, 0, 2)),
        ("expanded_b", r(4, 16, 32), r(1, 32, 8).expand(4, 32, 8)),
    ]
    for _label, a, b in cases:
        _check(_run(style, dev, torch.bmm, a, b), a, b)
        self = r(4, 1, 8)
        got = _run(style, dev, functools.partial(torch.baddbmm, beta=0.5), self, a, b)
        _check(got, a, b, self.expand(4, 16, 8), 0.5)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_linear_forward_and_backward_match_cpu(plugin, dt):
    """nn.Linear in a 16-bit type: output, input, weight and bias gradients against CPU's."""
    dev = plugin_device(plugin)
    torch.manual_seed(4)
    lin = torch.nn.Linear(96, 48).to(dt)
    x = torch.randn(3, 40, 96).to(dt)
    gy = torch.randn(3, 40, 48).to(dt)
    want_x = x.clone().requires_grad_()
    y_cpu = lin(want_x)
    y_cpu.backward(gy)
    grads_cpu = [want_x.grad, lin.weight.grad, lin.bias.grad]
    lin.zero_grad()
    lin_d = lin.to(dev)
    xd = x.to(dev).requires_grad_()
    y = lin_d(xd)
    y.backward(gy.to(dev))
    eps = torch.finfo(dt).eps if dt != torch.float32 else 1e-5
    for got, want, k in zip(
        [y, xd.grad, lin_d.weight.grad, lin_d.bias.grad], [y_cpu.detach(), *grads_cpu], [96, 48, 120, 120]
    ):
        assert got.dtype == dt
        torch.testing.assert_close(got.cpu(), want, rtol=2 * eps, atol=2 * eps * math.sqrt(k))


_CHILD = """
import torch, torch_fl
dev, dt = {dev!r}, torch.bfloat16
g = torch.Generator().manual_seed(5)
a, b, s = (torch.randn(sh, generator=g).to(dt) for sh in ((64, 128), (128, 48), (48,)))
want = torch.addmm(s, a, b)
got = torch.addmm(s.to(dev), a.to(dev), b.to(dev)).cpu()
with torch_fl.ral_mode(dev):
    got_mode = torch.mm(a, b).cpu()
torch.testing.assert_close(got, want, rtol=2 ** -6, atol=0.1)
torch.testing.assert_close(got_mode, torch.mm(a, b), rtol=2 ** -6, atol=0.1)
print("CHILD-DONE")
"""


def _matmul_lines(stdout: str) -> list[str]:
    """oneDNN 2.x's trace lines of executed matmuls (PyTorch's bundled 3.x writes
    `onednn_verbose,v1,primitive,exec,...`, so its lines never match)."""
    return [ln for ln in stdout.splitlines() if ln.startswith("onednn_verbose,exec,cpu,matmul,")]


@pytest.mark.skipif(not dnnl_loads(), reason="libdnnl.so.2 does not load here: the plugins widen to float32")
@pytest.mark.skipif(not native_bf16(), reason="no AVX512-BF16/AMX-BF16: oneDNN's bfloat16 matmul is reference code")
@pytest.mark.parametrize("plugin", PLUGINS)
def test_bfloat16_products_run_onednn_bf16_matmul(plugin):
    dev = plugin_device(plugin)
    out = run_python(_CHILD.format(dev=dev), env={"ONEDNN_VERBOSE": "1"})
    assert out.returncode == 0 and "CHILD-DONE" in out.stdout, out.stderr[-3000:]
    lines = _matmul_lines(out.stdout)
    assert len(lines) >= 2, out.stdout[-2000:]
    assert all("bf16" in ln and "ref" not in ln.split(",")[4] for ln in lines), lines


_CHILD_F32 = """
import torch, torch_fl
dev = {dev!r}
g = torch.Generator().manual_seed(6)
big = [torch.randn(sh, generator=g) for sh in ((256, 512), (512, 192), (192,))]
small = [torch.randn(sh, generator=g) for sh in ((16, 16), (16, 16))]
print("BIG-START", flush=True)
got = torch.addmm(*(t.to(dev) for t in big[::-1][:1] + big[:2])).cpu()
torch.ral.synchronize(dev)
print("SMALL-START", flush=True)
got_small = torch.mm(*(t.to(dev) for t in small)).cpu()
torch.ral.synchronize(dev)
print("SMALL-END", flush=True)
torch.testing.assert_close(got, torch.addmm(big[2], big[0], big[1]), rtol=1e-5, atol=1e-4)
torch.testing.assert_close(got_small, torch.mm(*small), rtol=1e-5, atol=1e-5)
print("CHILD-DONE")
"""


@pytest.mark.skipif(not dnnl_loads(), reason="libdnnl.so.2 does not load here: ral:1 keeps PoCL's float32 GEMM")
def test_large_float32_products_on_opencl_run_onednn_small_ones_inline():
    dev = plugin_device("opencl")
    out = run_python(_CHILD_F32.format(dev=dev), env={"ONEDNN_VERBOSE": "1"})
    assert out.returncode == 0 and "CHILD-DONE" in out.stdout, out.stderr[-3000:]
    big = out.stdout.split("BIG-START")[1].split("SMALL-START")[0]
    small = out.stdout.split("SMALL-START")[1].split("SMALL-END")[0]
    lines = _matmul_lines(big)
    assert len(lines) == 1 and "src_f32" in lines[0] and "ref" not in lines[0].split(",")[4], lines
    assert _matmul_lines(small) == []


@pytest.mark.skipif(not dnnl_loads(), reason="libdnnl.so.2 does not load here: nothing to switch off")
@pytest.mark.parametrize(("plugin", "switch"), [("host", "TORCH_FL_HOST_DNNL"), ("opencl", "TORCH_FL_OPENCL_DNNL")])
def test_switch_off_runs_the_plugins_own_gemm(plugin, switch):
    dev = plugin_device(plugin)
    out = run_python(_CHILD.format(dev=dev), env={"ONEDNN_VERBOSE": "1", switch: "0"})
    assert out.returncode == 0 and "CHILD-DONE" in out.stdout, out.stderr[-3000:]
    assert _matmul_lines(out.stdout) == []
