"""backend="ral" internals: scalars baked into fused kernels, replay of recorded launches, and
results against CPU float32 on ral:0 and ral:1 (TORCH_FL_TEST_DEVICE picks the device)."""

from __future__ import annotations

import math
import os

import pytest
import torch
from sweep_support import need_device

import torch_fl  # noqa: F401

DEVICE = os.environ.get("TORCH_FL_TEST_DEVICE", "ral:0")
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True)
def _fresh():
    import torch_fl.jit.compile_backend  # noqa: F401 (registers backend="ral")

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def graphs(monkeypatch):
    """Every partitioned graph the ral backend produces while the test runs."""
    from torch_fl.jit import compile_backend

    seen = []
    real = compile_backend.partition

    def spy(gm):
        out = real(gm)
        seen.append(out)
        return out

    monkeypatch.setattr(compile_backend, "partition", spy)
    return seen


@pytest.fixture
def math_fuses(monkeypatch):
    """Transcendentals fuse on every device: the region-count tests check the partitioner, and
    an OpenCL device (TORCH_FL_TEST_DEVICE=ral:1) keeps them out of regions by policy, which
    test_opencl_keeps_math_calls_out_of_fused_regions checks."""
    monkeypatch.setenv("TORCH_FL_CL_FUSE_MATH", "1")


@pytest.mark.parametrize("exponent", [2, 3.0, 0.5, -0.5, -1, -2.0, 1.7])
def test_pow_exponent_baked_matches_cpu(exponent, sources):
    """The exponent is a graph constant: the kernel gets the special form (x*x*x for 3), not
    pow() per element (libmvec's vector powf takes a slow scalar path for negative bases)."""
    x = torch.randn(64, 33)
    x[0, :4] = torch.tensor([0.0, -0.0, float("inf"), float("-inf")])
    if exponent in (0.5, -0.5, 1.7):
        x = x.abs()  # negative bases give NaN on both sides; keep the comparison meaningful

    def f(t):
        return (t * 1.5 + 0.25).pow(exponent) * 2.0

    got = torch.compile(f, backend="ral")(x.to(DEVICE))
    torch.testing.assert_close(got.cpu(), f(x), rtol=2e-6, atol=1e-6, equal_nan=True)
    fused = [s for s in sources if "rlk_" in s]
    assert fused, "the pointwise chain did not fuse"
    assert any("1.5f" in s for s in fused), "the scalar was not baked into the source"
    if exponent != 1.7:
        assert not any(" pow(" in s.split("#endif")[-1] for s in fused), "pow() left in the loop"


def test_gelu_new_training_matches_cpu():
    """GPT-2's gelu_new (pow 3, tanh) through forward and backward, the case baking made fast."""

    def gelu_new(t):
        return 0.5 * t * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * torch.pow(t, 3.0))))

    x = torch.randn(8, 128) * 3
    ref = x.clone().requires_grad_()
    gelu_new(ref).sum().backward()
    xr = x.to(DEVICE).requires_grad_()
    f = torch.compile(gelu_new, backend="ral")
    for _ in range(2):  # the second call replays the recorded launches
        xr.grad = None
        out = f(xr)
        out.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), gelu_new(x), **TOL)
    torch.testing.assert_close(xr.grad.cpu(), ref.grad, **TOL)


def _chain(x, w):
    h = x @ w
    h = torch.nn.functional.gelu(h, approximate="tanh") * torch.sigmoid(h) + 0.5 * h
    return h * torch.tanh(h) - torch.exp(-h * h) * 0.25 + h.abs() * 0.1


def _train_twice_matches_cpu(fn, x, w):
    """fn(x, w) compiled on the device, two steps (record, then replay): its output and w's
    gradient against eager CPU float32."""
    wr = w.to(DEVICE).requires_grad_()
    f = torch.compile(fn, backend="ral")
    for _ in range(2):
        wr.grad = None
        out = f(x.to(DEVICE), wr)
        out.pow(2).sum().backward()
    wc = w.clone().requires_grad_()
    ref = fn(x, wc)
    ref.pow(2).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), **TOL)
    torch.testing.assert_close(wr.grad.cpu(), wc.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("math_fuses")
def test_chain_fwd_and_bwd_are_one_region_each(graphs):
    """The benchmark MLP's activation chain: one fused region in the forward graph and one in
    the backward (the detach nodes AOT puts on tanh/sigmoid outputs no longer split it, and a
    host group is not capped at OpenCL's 12 tensors); gradients match CPU."""
    torch.manual_seed(0)
    _train_twice_matches_cpu(_chain, torch.randn(16, 24), torch.randn(24, 32) / 5)
    assert len(graphs) == 2
    regions = [sum(n.op == "call_module" for n in g.graph.nodes) for g in graphs]
    assert regions == [1, 1], regions
    detaches = [n for g in graphs for n in g.graph.nodes if n.target == torch.ops.aten.detach.default]
    assert all(u.op == "output" for n in detaches for u in n.users)  # only graph outputs keep theirs


def test_fuse_region_bakes_pow_exponent(sources):
    """Eager `fuse()` regions bake pow's exponent too (other scalars stay run-time values):
    a multi-output group with x**3 of negative bases matches CPU and calls no pow()."""
    x = torch.randn(4, 300) * 3
    xr = x.to(DEVICE)
    with torch_fl.fuse():
        a = xr * 0.75
        b = torch.pow(a, 3.0)
        c = torch.tanh(b + a)
    torch.testing.assert_close(a.cpu(), x * 0.75, **TOL)
    torch.testing.assert_close(b.cpu(), (x * 0.75) ** 3, rtol=2e-6, atol=1e-5)
    torch.testing.assert_close(c.cpu(), torch.tanh((x * 0.75) ** 3 + x * 0.75), **TOL)
    fused = [s for s in sources if "rlk_" in s]
    assert fused and not any(" pow(" in s.split("#endif")[-1] for s in fused)
    assert not any("0.75f" in s for s in fused), "only pow's exponent is baked in eager regions"


def _masked(x):
    """A GPT-2-style mask built from shapes only (arange, cumsum, advanced indexing), then used."""
    b, n = x.shape[0], x.shape[-1]
    pos = torch.arange(n, device=x.device).unsqueeze(0).expand(b, -1)
    seg = torch.cumsum((pos % 3) != 1, -1)
    bi = torch.arange(b, device=x.device)[:, None, None]
    q, k = torch.arange(n, device=x.device)[None, :, None], torch.arange(n, device=x.device)[None, None, :]
    mask = (pos[bi, k] <= pos[bi, q]) & (seg[bi, q] == seg[bi, k])
    return torch.where(mask, x, -1.0).softmax(-1)


def test_shape_only_mask_is_folded(graphs, monkeypatch):
    """The mask depends on no input: it is computed once at compile time, so the compiled graph
    runs no index/cumsum (cpu tier, a stream sync each) and no sync at all per call; results
    still follow the input on later calls."""
    from torch_fl.device import sync

    f = torch.compile(_masked, backend="ral")
    torch.manual_seed(0)
    f(torch.randn(2, 6, 6).to(DEVICE))
    syncs = []
    monkeypatch.setattr(sync, "SYNC_OBSERVERS", [lambda dev, why: syncs.append(why)])
    x = torch.randn(2, 6, 6)
    got = f(x.to(DEVICE))
    monkeypatch.setattr(sync, "SYNC_OBSERVERS", [])
    torch.testing.assert_close(got.cpu(), _masked(x), **TOL)
    assert syncs == [], syncs
    left = [n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.index.Tensor not in left and torch.ops.aten.cumsum.default not in left, left
    assert any(n.op == "get_attr" for g in graphs for n in g.graph.nodes)


def test_fold_leaves_random_and_returned_values():
    """Random ops are not folded (each call draws anew) and a constant the graph returns is a
    fresh tensor per call (the caller may write into it)."""

    def f(x):
        return x + torch.rand(4, device=x.device), torch.ones(4, device=x.device) * 2

    g = torch.compile(f, backend="ral")
    x = torch.zeros(4).to(DEVICE)
    a1, c1 = g(x)
    a2, c2 = g(x)
    assert not torch.equal(a1.cpu(), a2.cpu())
    c1.add_(1)
    torch.testing.assert_close(c2.cpu(), torch.full((4,), 2.0))


def _bench_case(name):
    """A model of benchmarks/bench_compile.py (one definition: the test checks what is timed)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_compile.py"
    spec = importlib.util.spec_from_file_location("bench_compile_for_tests", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CASES[name]()


@pytest.mark.usefixtures("math_fuses")
@pytest.mark.parametrize("case", ["pointwise_mlp", "mlp"])
def test_benchmark_mlp_training_matches_cpu(case, graphs):
    """The benchmark's MLP blocks, compiled on the device, against eager CPU float32: output,
    loss and every parameter's gradient, on the recording call and on the replaying one."""
    model, x = _bench_case(case)
    ref = model
    dev_model = _bench_case(case)[0].to(DEVICE)
    out_ref = ref(x)
    out_ref.pow(2).mean().backward()
    f = torch.compile(dev_model, backend="ral")
    xd = x.to(DEVICE)
    for _ in range(2):
        dev_model.zero_grad()
        out = f(xd)
        loss = out.pow(2).mean()
        loss.backward()
    torch.testing.assert_close(out.detach().cpu(), out_ref.detach(), rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(ref.named_parameters(), dev_model.named_parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)
    regions = [sum(n.op == "call_module" for n in g.graph.nodes) for g in graphs]
    assert regions == [1, 1], regions  # the chain is one kernel forward, one backward


def _swiglu(x, w):
    g, u = (x @ w).chunk(2, -1)
    return torch.nn.functional.silu(g) * torch.tanh(u) * torch.exp(-u * u)


@pytest.mark.usefixtures("math_fuses")
def test_joint_graph_recomputes_chain_instead_of_saving(graphs):
    """Before min-cut, the joint graph loses its detach nodes and constant fills: the forward
    saves only the chain's input (not sigmoid/tanh/exp results), silu's backward sigmoid joins
    the backward kernel, and values and gradients still match CPU."""
    torch.manual_seed(0)
    _train_twice_matches_cpu(_swiglu, torch.randn(32, 16), torch.randn(16, 48) / 4)
    fw, bw = graphs
    saved = [a for a in fw.graph.output_node().args[0][1:] if isinstance(a, torch.fx.Node)]
    from_region = [
        a for a in saved if a.op == "call_function" and a.args and getattr(a.args[0], "op", "") == "call_module"
    ]
    assert from_region == [], f"the forward saves fused intermediates: {from_region}"
    left = {n.target for n in bw.graph.nodes if n.op == "call_function"}
    aten = torch.ops.aten
    assert not left & {aten.fill.Scalar, aten.empty_like.default, aten.sigmoid.default}, left


def _fills(x):
    ones = torch.ops.aten.fill.Scalar(torch.empty_like(x), 1.0)
    twos = torch.full_like(x, 2.0)
    row = torch.ops.aten.fill.Scalar(torch.empty_like(x[:1]), 3.0)  # broadcasts: stays a tensor
    a = ones - torch.sigmoid(x)  # rsub
    b = x + twos  # add, fill second
    c = twos + x  # add, fill first
    d = x - ones  # sub
    e = x * twos + twos * x  # mul both ways
    g = x / twos  # div by the fill
    h = twos / x  # fill divided: stays a tensor
    i = x * row  # broadcast: stays a tensor
    return a, b, c, d, e, g, h, i


def test_inline_fills_rewrites_only_same_shape_uses():
    """Each rewritten use computes the same values as with the constant tensor; uses that
    broadcast it or divide by the tensor keep it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_fl.jit.compile_backend import inline_fills

    x = torch.randn(5, 7)
    gm = make_fx(_fills)(x)
    before = [t.cpu() for t in gm(x.to(DEVICE))]
    assert inline_fills(gm) == 7
    gm.recompile()
    left = [n for n in gm.graph.nodes if n.target in (torch.ops.aten.fill.Scalar, torch.ops.aten.full_like.default)]
    assert len(left) == 2, left  # `row` (broadcast) and `twos` (still used by h)
    for got, same, want in zip(gm(x.to(DEVICE)), before, _fills(x)):
        torch.testing.assert_close(got.cpu(), same, rtol=0, atol=0)  # the device's own kernels: bit-equal
        torch.testing.assert_close(got.cpu(), want, **TOL)


def _residual(x, w, r):
    h = torch.nn.functional.dropout(x @ w, 0.0, training=True)  # a clone in the traced graph
    return torch.nn.functional.gelu(h + r), (x @ w).clone()


def test_drop_clones_keeps_returned_and_layout_changing_clones(graphs):
    """dropout(p=0)'s clone before a functional add is bypassed; the clone the graph returns
    stays a fresh tensor (writing into it leaves the next call alone); values match CPU."""
    torch.manual_seed(0)
    x, w, r = torch.randn(6, 8), torch.randn(8, 8), torch.randn(6, 8)
    f = torch.compile(_residual, backend="ral")
    args = [t.to(DEVICE) for t in (x, w, r)]
    a1, c1 = f(*args)
    a2, c2 = f(*args)
    want_a, want_c = _residual(x, w, r)
    torch.testing.assert_close(a2.cpu(), want_a, **TOL)
    c1.add_(1.0)
    torch.testing.assert_close(c2.cpu(), want_c, **TOL)
    (g,) = graphs
    clones = [n for n in g.graph.nodes if n.target == torch.ops.aten.clone.default]
    assert len(clones) == 1 and all(u.op == "output" for u in clones[0].users), clones


DEVICES = ["ral:0", "ral:1"]


@pytest.mark.parametrize("dev", DEVICES)
def test_dynamic_shapes_replay_per_size(dev, monkeypatch):
    """After a second size Dynamo compiles one graph with symbolic sizes and calls it with
    every later size. Recorded launches hold the sizes (and the baked size-derived scalars)
    they were recorded with, so a replay must never serve another size: it once returned a
    200-element result for a 300-element input, silently."""
    from torch_fl.jit import compile_backend

    def fn(x, y):
        return torch.sigmoid(x * x.shape[0] + y) * x - x.shape[-1]

    replays, real = [], compile_backend._Replay.__call__

    def counted(self, args):
        replays.append(args[0].shape if args and isinstance(args[0], torch.Tensor) else None)
        return real(self, args)

    monkeypatch.setattr(compile_backend._Replay, "__call__", counted)
    f = torch.compile(fn, backend="ral")
    torch.manual_seed(0)
    for shape in [(100,), (200,), (300,), (50,), (300,), (4, 64), (9, 64), (2, 64), (9, 64)]:
        x, y = torch.randn(shape) / 50, torch.randn(shape)
        out = f(x.to(dev), y.to(dev)).cpu()
        assert out.shape == x.shape
        torch.testing.assert_close(out, fn(x, y), **TOL, msg=f"shape {shape}")
    assert replays, "a size seen before must replay its recorded launches"


def test_replay_key_holds_geometry_and_scalar_values():
    """What the key is made of: a change in any of these must not replay old launches."""
    from torch_fl.jit.compile_backend import replay_key

    a = torch.zeros(4, 6, device=DEVICE)
    base = replay_key((a, 3, 0.5, None))
    assert base is not None
    for other in [
        (torch.zeros(4, 7, device=DEVICE), 3, 0.5, None),  # shape
        (a.t(), 3, 0.5, None),  # shape and strides
        (torch.zeros(6, 4, device=DEVICE).t(), 3, 0.5, None),  # strides only
        (a.double(), 3, 0.5, None),  # dtype
        (a, 4, 0.5, None),  # a symbolic size's value
        (a, 3, 0.25, None),  # a baked float
        (a, 3, -0.5, None),  # its sign
    ]:
        assert replay_key(other) != base
    assert replay_key((a, 0.0)) != replay_key((a, -0.0))  # x * 0.0 and x * -0.0 differ in sign
    assert replay_key((a, math.nan)) == replay_key((a, math.nan))  # NaN replays
    assert replay_key((a.clone(), 3, 0.5, None)) == base  # new data, same geometry: replays
    assert replay_key((a, object())) is None  # unknown inputs never replay


_OPTIMIZERS = [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
    (torch.optim.Adam, dict(lr=0.01, amsgrad=True)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1, foreach=True)),
    (torch.optim.RMSprop, dict(lr=0.01)),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("cls,kw", _OPTIMIZERS, ids=[f"{c.__name__}-{'-'.join(k)}" for c, k in _OPTIMIZERS])
def test_compiled_optimizer_step_matches_cpu(cls, kw, dev):
    """torch.compile(opt.step, backend="ral"): three steps on the device, parameters (and so
    the optimizer state that produced them) against the eager CPU optimizer."""
    if torch.ral.device_count() <= int(dev[-1]):
        pytest.skip(f"{dev} is not present")
    torch.manual_seed(0)
    start = [torch.randn(5, 3), torch.randn(7)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(3)]

    def run(where, compiled):
        params = [p.clone().to(where).requires_grad_() for p in start]
        opt = cls(params, **kw)
        step = torch.compile(opt.step, backend="ral") if compiled else opt.step
        for g in grads:
            for p, gp in zip(params, g):
                p.grad = gp.to(where)
            step()
        return [p.detach().cpu() for p in params]

    for got, want in zip(run(dev, True), run("cpu", False)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_autocast_chain_fuses_half_storage_and_matches_eager(dtype, dev, sources):
    """backend="ral" under torch.autocast("ral"): the matmul runs in half precision and the
    activation chain after it (half until autocast's float32 ops), forward and backward, in
    fused kernels that load and round half-precision values where
    the device declares the dtype (ral:0; PoCL's ral:1 declares neither, so nothing half is
    generated there). The output and gradient match eager autocast on the same device to
    two half-precision ulps, and CPU autocast within the dtype's tolerance."""
    if torch.ral.device_count() <= int(dev[-1]):
        pytest.skip(f"{dev} is not present")
    from torch_fl.device.amp import supported_dtypes
    from torch_fl.jit.target import target_of

    if dtype not in supported_dtypes(int(dev[-1])):
        pytest.skip(f"{dev} has no {dtype} autocast (its plugin does not declare it native)")

    torch.manual_seed(0)
    x, w = torch.randn(64, 24), torch.randn(24, 32) / 5

    def run(where, compiled):
        wd = w.to(where).requires_grad_()
        f = torch.compile(_chain, backend="ral") if compiled else _chain
        for _ in range(2 if compiled else 1):
            wd.grad = None
            with torch.autocast(where.split(":")[0], dtype=dtype):
                out = f(x.to(where), wd)
            out.float().pow(2).sum().backward()
        return out.detach().cpu(), wd.grad.cpu()

    (out, grad), (e_out, e_grad) = run(dev, True), run(dev, False)
    c_out, c_grad = run("cpu", False)
    # exp is on CUDA autocast's float32 list (ral's policy), not on CPU's: float32 vs half
    assert (out.dtype, e_out.dtype, c_out.dtype) == (torch.float32, torch.float32, dtype)
    ulp = 2 * torch.finfo(dtype).eps
    torch.testing.assert_close(out, e_out, rtol=ulp, atol=ulp)
    torch.testing.assert_close(grad, e_grad, rtol=ulp, atol=ulp * grad.abs().max().item())
    tol = {torch.bfloat16: 3e-2, torch.float16: 5e-3}[dtype]
    torch.testing.assert_close(out.float(), c_out.float(), rtol=tol, atol=tol)
    torch.testing.assert_close(grad.float(), c_grad.float(), rtol=tol, atol=tol * c_grad.abs().max().item())
    load = {torch.bfloat16: "ral_bf2f(", torch.float16: "ral_h2f("}[dtype]
    half_kernels = sum(load in s for s in sources)
    if dtype in target_of(int(dev[-1])).lowp:
        assert half_kernels >= 2, f"forward and backward chains should fuse in {dtype}: {half_kernels} kernels"
    else:
        assert half_kernels == 0


def _casts(x):
    h = torch.sigmoid(x).to(torch.bfloat16) * 3  # rounds to bfloat16 between two float ops
    i = (h.float() * 7).to(torch.int32)  # to an integer: not fused (C's conversion differs)
    return torch.tanh(h.to(torch.float16)).double() + 1, i


@pytest.mark.parametrize("dev", DEVICES)
def test_dtype_casts_fuse_into_regions(dev, sources, graphs):
    """Casts between float dtypes on the device (`_to_copy(dtype=)`, autocast's) join fused
    regions instead of splitting them: values equal CPU's bit for bit, the float->int cast stays
    a graph op, and where the device declares no half dtypes (ral:1) the half steps run op by
    op, still exactly."""
    if torch.ral.device_count() <= int(dev[-1]):
        pytest.skip(f"{dev} is not present")
    from torch_fl.jit.target import target_of

    x = torch.randn(64, 33) * 4
    f = torch.compile(_casts, backend="ral")
    for _ in range(2):  # record, then replay
        got = [t.cpu() for t in f(x.to(dev))]
    want = _casts(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    to_copy = torch.ops.aten._to_copy.default
    left = [n for n in graphs[0].graph.nodes if n.target == to_copy]
    assert [n.kwargs["dtype"] for n in left] == [torch.int32], left
    if {torch.bfloat16, torch.float16} <= target_of(int(dev[-1])).lowp:
        assert any("ral_round_bf16(" in s and "ral_round_f16(" in s for s in sources), "casts did not fuse"


def _transposed_chain(x):
    y = torch.sigmoid(x.t()) * 2 + 1  # eager: y keeps x.t()'s transposed layout
    return y.t().view(-1), y


@pytest.mark.parametrize("dev", DEVICES)
def test_region_outputs_keep_eager_layout(dev):
    """A fused region's outputs get the strides eager gives (here transposed, as its input),
    compiled (recorded and replayed) and in a fuse() region: code after it may `view` them in
    ways only that layout allows. Contiguous outputs failed GPT-2's attention backward under
    autocast with 'view size is not compatible'."""
    if torch.ral.device_count() <= int(dev[-1]):
        pytest.skip(f"{dev} is not present")
    x = torch.randn(8, 6)
    flat, y = _transposed_chain(x)
    f = torch.compile(_transposed_chain, backend="ral")
    for _ in range(2):
        got_flat, got_y = f(x.to(dev))
        assert got_y.stride() == y.stride()
        torch.testing.assert_close(got_flat.cpu(), flat, **TOL)
        torch.testing.assert_close(got_y.cpu(), y, **TOL)
    from torch_fl.jit import fuse

    with fuse():
        z = torch.sigmoid(x.to(dev).t()) * 2 + 1
    assert z.stride() == y.stride()
    torch.testing.assert_close(z.t().view(-1).cpu(), flat, **TOL)


def _autocast_transposed_chain(x, w):
    h = x @ w  # bfloat16 under autocast; ral:1 has no bfloat16 kernels, so sigmoid runs on CPU
    return (torch.sigmoid(h.t()) * 2 + 1).t().view(-1)


@pytest.mark.parametrize("backend", ["ral", "aot_eager"])
@pytest.mark.parametrize("dev", DEVICES)
def test_autocast_graph_views_a_cpu_tier_result(dev, backend):
    """Under bfloat16 autocast, a graph that views the transposed result of an op the device
    has no kernel for (ral:1: the cpu tier) runs and matches CPU autocast. The cpu tier once
    uploaded results row-major, and the view raised 'view size is not compatible'."""
    need_device(dev)
    x, w = torch.randn(4, 8), torch.randn(8, 6)
    with torch.autocast("cpu", torch.bfloat16):
        expected = _autocast_transposed_chain(x, w)
    torch._dynamo.reset()
    f = torch.compile(_autocast_transposed_chain, backend=backend)
    for _ in range(2):
        with torch.autocast("ral", torch.bfloat16):
            got = f(x.to(dev), w.to(dev))
        assert got.dtype == expected.dtype
        # bfloat16 tolerance: values up to 3, one bf16 ulp there is 1.6e-2
        torch.testing.assert_close(got.cpu().float(), expected.float(), rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("dev", ["ral:0", "ral:1"])
def test_opencl_keeps_math_calls_out_of_fused_regions(dev, graphs):
    """On OpenCL (PoCL computes a generated kernel's exp one scalar call per work-item) the
    math ops take the plugin's vectorised kernels and the chains around them still fuse; a
    float32 tanh fuses (the kernel's 16-lane loop computes it as the plugin's kernel does). On
    the host they stay inside the fused kernel. Forward and backward against CPU."""
    need_device(dev)

    def fn(x, w):
        h = x * w
        return 0.5 * h * (1 + torch.tanh(0.79788456 * (h + 0.044715 * h * h * h))) + torch.exp(-h * h) * 0.25

    x, w = torch.randn(64, 32), torch.randn(32, requires_grad=True)
    want = fn(x, w)
    want.sum().backward()
    wd = w.detach().to(dev).requires_grad_()
    f = torch.compile(fn, backend="ral")
    f(x.to(dev), wd)  # compile
    wd.grad = None
    with torch_fl.coverage() as cov:
        got = f(x.to(dev), wd)
        got.sum().backward()
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wd.grad.cpu(), w.grad, rtol=1e-4, atol=1e-5)
    single = set(cov.ops_in_tier("vendor")) & {"aten::tanh", "aten::exp"}
    assert single == ({"aten::exp"} if dev == "ral:1" else set())
    assert any(n.op == "call_module" and n.target.startswith("fused_") for g in graphs for n in g.graph.nodes)
