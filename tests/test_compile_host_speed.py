"""What makes inductor's C++ kernels on ral:0 faster than inductor's own code
(torch_fl/jit/inductor_math.py): float vector tanh as ral_fastmath.h's `ral_tanhf` in at::vec
operations. Values against eager CPU float32 (ulp bounds for tanh itself, tolerances for a
trained block); the generated code says which tanh ran. ral:1 compiles through the extern call
(no C++ kernels), whose fused kernels are tested in tests/test_compile_default_backend.py."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from compile_models import host_waits
from torch._inductor.utils import run_and_get_code

import torch_fl
from torch_fl.jit import inductor_key, inductor_math

pytestmark = pytest.mark.skipif(torch.ral.device_count() < 1, reason="ral:0 is not present")
TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _fresh():
    """Each test compiles its own code (no FX-graph or AOT cache hits)."""
    import torch._inductor.config as iconfig

    torch._dynamo.reset()
    with iconfig.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        yield


def _gelu(x):
    """GPT-2's tanh GELU, as transformers writes it."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def step(fn, o, t):
    """One SGD training step of `fn` on `t`; the output."""
    out = fn(t)
    out.pow(2).mean().backward()
    o.step()
    o.zero_grad()
    return out


def _tanh_inputs():
    special = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e-8, 0.6249999, 0.625, -0.625, 9.09, 9.1, 9.2, 20.0, -20.0])
    special = torch.cat([special, torch.tensor([math.inf, -math.inf, math.nan])])
    return torch.cat(
        [torch.linspace(-12, 12, 48001), torch.logspace(-20, 1, 4001), -torch.logspace(-20, 1, 4001), special]
    )


def _ulps(got, want):
    """Distance in float32 ulps of the exact value (float64 tanh), elementwise."""
    exact = torch.tanh(want.double())
    spacing = torch.nextafter(exact.float().abs(), torch.tensor(math.inf)).double() - exact.float().abs().double()
    return ((got.double() - exact).abs() / spacing.clamp_min(1e-45)).nan_to_num(0.0)


@pytest.mark.parametrize("style", ["to_device", "ral_mode"])
def test_tanh_in_a_kernel_is_ral_tanhf(style):
    """A compiled tanh (with a multiply, so the kernel is inductor's) takes ral_vtanh and stays
    within 3 ulps of the exact value on a dense sweep and at the branch points; inf, -0.0 and
    NaN as torch's."""
    x = _tanh_inputs()
    f = torch.compile(lambda t: torch.tanh(t * 1.0) * 1.0)
    if style == "to_device":
        got, code = run_and_get_code(f, x.to("ral:0"))
        got = got.cpu()
    else:
        with torch_fl.ral_mode("ral:0"):
            got, code = run_and_get_code(f, x)
            got = got.cpu()
    assert "ral_vtanh(" in "\n".join(code)
    want = torch.tanh(x)
    finite = want.isfinite() & ~want.isnan()
    assert _ulps(got[finite], x[finite]).max().item() <= 3.0
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(torch.signbit(got[~got.isnan()]), torch.signbit(want[~want.isnan()]))


def test_gelu_training_step_against_cpu():
    """Forward, backward and SGD of a Linear / tanh-GELU / Linear block on ral:0 match CPU, and
    the forward's and backward's kernels both take ral_vtanh."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Identity(), torch.nn.Linear(256, 64))
    x = torch.randn(48, 64) * 3

    class Block(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.a, self.b = inner[0], inner[2]

        def forward(self, t):
            return self.b(_gelu(self.a(t)))

    ref, m = Block(copy.deepcopy(model)), Block(copy.deepcopy(model)).to("ral:0")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    f = torch.compile(m)

    want = [step(ref, opt_ref, x) for _ in range(2)]
    got, code = run_and_get_code(lambda: [step(f, opt, x.to("ral:0")) for _ in range(2)])
    assert sum(c.count("ral_vtanh(") for c in code) >= 2, "forward and backward kernels take ral_vtanh"
    for g, w in zip(got, want):
        torch.testing.assert_close(g.detach().cpu(), w.detach(), **TOL)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), **TOL)


def test_switch_off_keeps_inductor_tanh_and_changes_the_cache_key(monkeypatch):
    """TORCH_FL_INDUCTOR_FAST_MATH=0: inductor's own vector tanh, and a different cache key."""
    on = inductor_key.digest()
    monkeypatch.setenv("TORCH_FL_INDUCTOR_FAST_MATH", "0")
    assert inductor_key.digest() != on
    x = torch.linspace(-3, 3, 4096)
    got, code = run_and_get_code(torch.compile(lambda t: torch.tanh(t * 1.0)), x.to("ral:0"))
    assert "ral_vtanh(" not in "\n".join(code) and ".tanh()" in "\n".join(code)
    torch.testing.assert_close(got.cpu(), torch.tanh(x), rtol=1e-6, atol=1e-7)


def test_rewrite_touches_only_vector_tanh():
    """Scalar tails (`std::tanh`) and sources without inductor's prefix are left as they are."""
    src = "#include <torch/csrc/inductor/cpp_prefix.h>\nauto tmp3 = tmp2.tanh(); float s = std::tanh(tmp5);"
    out = inductor_math.rewrite(src)
    assert (
        "ral_vtanh(tmp2)" in out
        and "std::tanh(tmp5)" in out
        and out.count("at::vec::Vectorized<float> ral_vtanh(") == 1
    )
    assert inductor_math.rewrite("auto tmp3 = tmp2.tanh();") == "auto tmp3 = tmp2.tanh();"


class _ResidualNorm(torch.nn.Module):
    """Linear, residual add and layer norm (GPT-2's block boundary), then a second layer norm."""

    def __init__(self, d=256):
        super().__init__()
        self.lin, self.ln, self.ln2 = torch.nn.Linear(d, d), torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x):
        return self.ln2(self.ln(x + self.lin(x)) * 2.0)


@pytest.mark.parametrize("style", ["to_device", "ral_mode"])
def test_layer_norm_statistics_in_two_steps(style):
    """Layer norm over 256 features compiles to the two-step variance a CPU compile has (no
    Welford in the kernels); forward, backward and SGD match CPU."""
    torch.manual_seed(0)
    model, x = _ResidualNorm(), torch.randn(2, 64, 256) * 4 + 3
    ref, m = copy.deepcopy(model), copy.deepcopy(model)
    opt_ref, opt = torch.optim.SGD(ref.parameters(), lr=0.1), torch.optim.SGD(m.parameters(), lr=0.1)
    f = torch.compile(m)

    want = [step(ref, opt_ref, x) for _ in range(2)]
    if style == "to_device":
        m.to("ral:0")
        got, code = run_and_get_code(lambda: [step(f, opt, x.to("ral:0")) for _ in range(2)])
    else:
        with torch_fl.ral_mode("ral:0"):
            got, code = run_and_get_code(lambda: [step(f, opt, x) for _ in range(2)])
    for g, w in zip(got, want):
        torch.testing.assert_close(g.detach().cpu(), w.detach(), **TOL)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), **TOL)
    assert code and not any("Welford<" in c for c in code)


def test_variance_switch_off_keeps_welford(monkeypatch):
    """TORCH_FL_INDUCTOR_FAST_MATH=0 leaves inductor's Welford reduction (and the values)."""
    monkeypatch.setenv("TORCH_FL_INDUCTOR_FAST_MATH", "0")
    torch.manual_seed(0)
    model, x = _ResidualNorm(), torch.randn(2, 64, 256)
    want = model(x)
    got, code = run_and_get_code(torch.compile(copy.deepcopy(model).to("ral:0")), x.to("ral:0"))
    assert any("Welford<" in c for c in code)
    torch.testing.assert_close(got.cpu(), want, **TOL)


def test_variance_rewrite_keeps_large_and_dynamic_reductions():
    """Rows longer than inductor's CPU threshold, a whole-tensor variance and unbiased `var`
    with a correction all match CPU; only rows up to the threshold are rewritten."""
    x = torch.randn(8, 2048) * 3 + 1

    def fn(t):
        v, m = torch.var_mean(t, dim=-1, correction=1)
        w, n = torch.var_mean(t[:, :300], dim=-1, keepdim=True, correction=0)
        return v, m, w, n, torch.var(t)

    got, code = run_and_get_code(torch.compile(fn), x.to("ral:0"))
    assert "Welford<" in "\n".join(code)  # the 2048-element rows keep Welford, as on CPU
    for g, w in zip(got, fn(x)):
        torch.testing.assert_close(g.cpu(), w, **TOL)


# --- kernels with index bounds checks, launched on the stream (inductor_async.guard, opt-in) ---


@pytest.fixture
def checked(monkeypatch):
    """The default (TORCH_FL_INDUCTOR_ASYNC_CHECKED unset, as =1): kernels with bounds checks
    are launched too."""
    monkeypatch.delenv("TORCH_FL_INDUCTOR_ASYNC_CHECKED", raising=False)


class _EmbedLoss(torch.nn.Module):
    """GPT-2's ends: an embedding lookup and a cross-entropy loss (nll_loss's target check)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.head = torch.nn.Linear(8, 6)

    def forward(self, ids, target):
        logits = self.head(self.emb(ids))
        return torch.nn.functional.cross_entropy(logits.view(-1, 6), target.view(-1))


@pytest.mark.parametrize("style", ["to_device", "ral_mode"])
def test_checked_kernels_run_on_the_stream(style, checked):
    """The embedding's and the loss's kernels (index bounds checks) are launched in stream order
    like the others: a training step waits for the device only where the test reads a value,
    and loss, gradients and updated weights match CPU."""
    from torch_fl.jit import inductor_async

    torch.manual_seed(0)
    model = _EmbedLoss()
    ids, target = torch.randint(0, 10, (4, 5)), torch.randint(0, 6, (4, 5))
    ref, m = copy.deepcopy(model), copy.deepcopy(model)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def train(fn, o, *args):
        o.zero_grad()
        loss = fn(*args)
        loss.backward()
        o.step()
        return loss

    want = [train(ref, opt_ref, ids, target).detach() for _ in range(2)]
    before = dict(inductor_async.STATS)
    if style == "to_device":
        f = torch.compile(m.to("ral:0"))
        got = [train(f, opt, ids.to("ral:0"), target.to("ral:0")) for _ in range(2)]
        waits, done = host_waits()
        got.append(train(f, opt, ids.to("ral:0"), target.to("ral:0")))
        done()
    else:
        with torch_fl.ral_mode("ral:0"):
            m.to("ral:0")
            f = torch.compile(m)
            got = [train(f, opt, ids, target) for _ in range(2)]
            waits, done = host_waits()
            got.append(train(f, opt, ids, target))
            done()
    want.append(train(ref, opt_ref, ids, target).detach())
    assert waits == [], f"host waits inside a compiled step: {waits}"
    assert inductor_async.STATS["guarded"] > before["guarded"]
    assert inductor_async.STATS["direct"] == before["direct"]
    for g, w in zip(got, want):
        torch.testing.assert_close(g.detach().cpu(), w, **TOL)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), **TOL)


def test_bad_index_raises_at_sync_and_the_process_keeps_working(checked):
    """An out-of-range token id (embedding) and an out-of-range class (nll_loss) in a compiled
    graph raise a RuntimeError naming inductor's check when the value is read, as CUDA reports
    a device-side assert; the same compiled function, and other tensors, keep working after."""
    torch.manual_seed(0)
    model = _EmbedLoss()
    ids, target = torch.randint(0, 10, (4, 5)), torch.randint(0, 6, (4, 5))
    want = model(ids, target)
    keep = torch.randn(3, 3)
    kept = keep.to("ral:0")
    f = torch.compile(copy.deepcopy(model).to("ral:0"))
    torch.testing.assert_close(f(ids.to("ral:0"), target.to("ral:0")).detach().cpu(), want.detach(), **TOL)
    bad_ids, bad_target = ids.clone(), target.clone()
    bad_ids[1, 2], bad_target[3, 4] = 10, 7
    for i, t in ((bad_ids, target), (ids, bad_target)):
        with pytest.raises(RuntimeError, match="index out of bounds") as err:
            f(i.to("ral:0"), t.to("ral:0")).detach().cpu()
        assert isinstance(err.value, torch_fl.KernelError), "reported by the stream, not a direct call"
        torch.testing.assert_close(f(ids.to("ral:0"), target.to("ral:0")).detach().cpu(), want.detach(), **TOL)
    torch.testing.assert_close(kept.cpu(), keep)
    torch.testing.assert_close((kept * 2).cpu(), keep * 2)


def test_bad_index_on_ral1_raises_and_good_ones_match_cpu(checked):
    """ral:1 (extern call, no C++ kernels) is unaffected: the same graph matches CPU and a bad
    token id raises a RuntimeError there too."""
    if torch.ral.device_count() < 2:
        pytest.skip("ral:1 is not present")
    torch.manual_seed(0)
    model = _EmbedLoss()
    ids, target = torch.randint(0, 10, (4, 5)), torch.randint(0, 6, (4, 5))
    want = model(ids, target)
    f = torch.compile(copy.deepcopy(model).to("ral:1"))
    torch.testing.assert_close(f(ids.to("ral:1"), target.to("ral:1")).detach().cpu(), want.detach(), **TOL)
    bad = ids.clone()
    bad[0, 0] = 12
    with pytest.raises(RuntimeError):
        f(bad.to("ral:1"), target.to("ral:1")).detach().cpu()
    torch.testing.assert_close(f(ids.to("ral:1"), target.to("ral:1")).detach().cpu(), want.detach(), **TOL)


def test_guard_wraps_the_kernel_and_keeps_its_definition_last():
    """`guard` declares ral_guarded_kernel before the kernel (inductor reads the source's last
    `extern "C"` as the kernel's definition) and defines it after, calling the kernel with its
    parameters; a source without inductor's prefix or kernel is left alone."""
    from torch_fl.jit.inductor_async import GUARDED, guard

    src = (
        "#include <torch/csrc/inductor/cpp_prefix.h>\n"
        'extern "C"  void  Placeholder.KERNEL_NAME(const int64_t* in_ptr0,\n      float* out_ptr0,\n'
        '      const int64_t ks0)\n{\n  TORCH_CHECK(false, "index out of bounds");\n}\n'
    )
    out = guard(src)
    tail = out[out.rfind('extern "C"') :]
    assert tail.startswith('extern "C"  void  Placeholder.KERNEL_NAME(')
    assert out.index(GUARDED) < out.rfind('extern "C"')
    assert "Placeholder.KERNEL_NAME(in_ptr0, out_ptr0, ks0);" in out
    assert f"void {GUARDED}(char* ral_error, const int64_t* in_ptr0, float* out_ptr0, const int64_t ks0) {{" in out
    assert guard(out) == out
    assert guard("int x;") == "int x;"


def test_checked_switch_off_calls_directly_and_changes_the_cache_key(monkeypatch):
    """Kernels with a bounds check are launched by default (as with
    TORCH_FL_INDUCTOR_ASYNC_CHECKED=1); with the switch at 0 such a kernel keeps the direct call
    and its Python error; the switch is part of inductor's cache key."""
    from torch_fl.jit import inductor_async

    monkeypatch.delenv("TORCH_FL_INDUCTOR_ASYNC_CHECKED", raising=False)
    assert inductor_async.checked_enabled()
    on = inductor_key.digest()
    monkeypatch.setenv("TORCH_FL_INDUCTOR_ASYNC_CHECKED", "1")
    assert inductor_key.digest() == on
    monkeypatch.setenv("TORCH_FL_INDUCTOR_ASYNC_CHECKED", "0")
    assert inductor_key.digest() != on
    w, idx = torch.randn(10, 4), torch.tensor([3, 2])
    f = torch.compile(lambda i, t: torch.nn.functional.embedding(i, t) * 2)
    before = dict(inductor_async.STATS)
    torch.testing.assert_close(f(idx.to("ral:0"), w.to("ral:0")).cpu(), torch.nn.functional.embedding(idx, w) * 2)
    assert inductor_async.STATS["direct"] > before["direct"]
    assert inductor_async.STATS["guarded"] == before["guarded"]
    with pytest.raises(RuntimeError, match="index out of bounds") as err:
        f(torch.tensor([1, 20]).to("ral:0"), w.to("ral:0")).cpu()
    assert not isinstance(err.value, torch_fl.KernelError)


_SPIN_PROBE = """
import os, sys, time
import torch, torch_fl
from torch_fl.jit import inductor_async
if sys.argv[1] == "unfixed":
    inductor_async.throttle_openmp_spin = lambda: None
x, w = torch.randn(128, 128), torch.randn(128, 128)
f = torch.compile(lambda x, w: torch.relu(x @ w) * 2 + x)
xd, wd = x.to("ral:0"), w.to("ral:0")
got = [f(xd, wd) for _ in range(3)][-1].cpu()
def others():
    ticks = 0
    for t in os.listdir("/proc/self/task"):
        if int(t) != os.getpid():
            fields = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks * 1000.0 / os.sysconf("SC_CLK_TCK")
before, launched = others(), inductor_async.STATS["launched"]
for _ in range(20):
    f(xd, wd)
    torch.ral.synchronize()
    time.sleep(0.01)
per_call = (others() - before) / 20
assert inductor_async.STATS["launched"] >= launched + 20, inductor_async.STATS
# CPU ops on this thread make PyTorch's own team (the fix's effect): checked after measuring
torch.testing.assert_close(got, torch.relu(x @ w) * 2 + x, rtol=1e-4, atol=1e-4)
print(per_call)
"""


def _threads_cpu_per_call(variant: str) -> float:
    """CPU milliseconds per call that a fresh process's threads other than the Python thread
    spend on a compiled GEMM + inductor kernel followed by 10 ms of idling."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env.pop("GOMP_SPINCOUNT", None)
    env.pop("OMP_WAIT_POLICY", None)
    out = subprocess.run([sys.executable, "-c", _SPIN_PROBE, variant], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return float(out.stdout.strip().splitlines()[-1])


def test_openmp_threads_sleep_after_a_launched_kernel():
    """An inductor kernel launched on the stream worker leaves no libgomp thread spinning after
    it (libgomp's default spin after a region is 300,000 rounds: milliseconds of a core the
    host plugin's pool needs); the result matches CPU. Fails without
    `inductor_async.throttle_openmp_spin` (the `unfixed` variant: about 10 ms per call)."""
    if torch.get_num_threads() < 2:
        pytest.skip("one OpenMP thread: inductor's kernels make no team to spin")
    assert _threads_cpu_per_call("fixed") < 3.0
