"""Inductor's C++ kernels on ral:0 launched in stream order (torch_fl/jit/inductor_async.py).

The default backend on a host-mappable device used to call each C++ kernel on the Python
thread after draining the stream; now kernels that cannot raise run on the device's stream
behind the GEMMs queued before them. Results against eager CPU float32; the counters say which
path ran. ral:1 compiles through the extern call (no C++ kernels): its default-backend tests
are tests/test_compile_default_backend.py."""

from __future__ import annotations

import copy

import pytest
import torch
from compile_models import Block, host_waits

import torch_fl
from torch_fl.jit import inductor_async

pytestmark = pytest.mark.skipif(torch.ral.device_count() < 1, reason="ral:0 is not present")
TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _fresh():
    """Each test compiles (a cache hit would still run the same wrapper, but the counters
    should see this test's calls only)."""
    import torch._inductor.config as iconfig

    torch._dynamo.reset()
    with iconfig.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        yield


@pytest.mark.parametrize("style", ["to_device", "ral_mode"])
def test_training_runs_kernels_on_the_stream(style):
    """Forward, backward and an optimizer step of a Linear/GELU/LayerNorm/softmax block: its C++
    kernels (reading GEMM outputs still queued on the stream) are launched, not called after a
    drain, and the results match CPU."""
    torch.manual_seed(0)
    model, x = Block(), torch.randn(32, 8)
    ref, m = copy.deepcopy(model), copy.deepcopy(model)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    f = torch.compile(m)

    def step(fn, o, t):
        out = fn(t)
        out.pow(2).sum().backward()
        o.step()
        o.zero_grad()
        return out

    for _ in range(2):
        want = step(ref, opt_ref, x)
    before = dict(inductor_async.STATS)
    seen, stop = host_waits()
    try:
        if style == "to_device":
            m.to("ral:0")
            for _ in range(2):
                got = step(f, opt, x.to("ral:0"))
        else:
            with torch_fl.ral_mode("ral:0"):
                for _ in range(2):
                    got = step(f, opt, x)
    finally:
        stop()
    torch.testing.assert_close(got.cpu(), want, **TOL)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), **TOL)
    launched = inductor_async.STATS["launched"] - before["launched"]
    assert launched >= 4  # forward and backward kernels, two steps
    assert inductor_async.STATS["direct"] == before["direct"]
    assert "inductor kernel" not in seen  # no drain before a C++ kernel


def test_dynamic_sizes_reach_the_kernel_as_ints():
    """dynamic=True: the kernels take the sizes as int arguments (the trampoline's plan)."""
    fn = lambda a, b: ((a @ b).tanh() * 2 + a.sum(1, keepdim=True)).softmax(-1)  # noqa: E731
    f = torch.compile(fn, dynamic=True)
    before = inductor_async.STATS["launched"]
    for n in (5, 9, 13):
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.testing.assert_close(f(a.to("ral:0"), b.to("ral:0")).cpu(), fn(a, b), **TOL)
    assert inductor_async.STATS["launched"] - before >= 3


def test_in_place_write_into_an_input_and_a_view():
    """A kernel that writes through an input view (inductor's in_out pointer): the write lands
    at the view's offset, in stream order with the GEMM before it."""

    def fn(a, b):
        a[1:3].mul_(2).add_(a[1:3] @ b[:, :4].T)
        return a

    a, b = torch.randn(5, 4), torch.randn(4, 6)
    want = fn(a.clone(), b)
    da = a.to("ral:0")
    got = torch.compile(fn)(da, b.to("ral:0"))
    torch.testing.assert_close(da.cpu(), want, **TOL)
    torch.testing.assert_close(got.cpu(), want, **TOL)


def test_kernels_that_can_raise_keep_the_direct_call(monkeypatch):
    """With TORCH_FL_INDUCTOR_ASYNC_CHECKED=0, a bounds check (embedding) or integer division
    raises a Python exception from the kernel on the calling thread, and the process keeps
    working (launched on the stream by default: tests/test_compile_host_speed.py)."""
    monkeypatch.setenv("TORCH_FL_INDUCTOR_ASYNC_CHECKED", "0")
    before = dict(inductor_async.STATS)
    w = torch.randn(10, 4)
    f = torch.compile(lambda i, t: torch.nn.functional.embedding(i, t) * 2)
    with pytest.raises(RuntimeError, match="index out of bounds"):
        f(torch.tensor([1, 20]).to("ral:0"), w.to("ral:0")).cpu()
    idx = torch.tensor([3, 2])
    torch.testing.assert_close(f(idx.to("ral:0"), w.to("ral:0")).cpu(), torch.nn.functional.embedding(idx, w) * 2)
    g = torch.compile(lambda a, b: a // b + 1)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        g(torch.tensor([4, 5]).to("ral:0"), torch.tensor([2, 0]).to("ral:0")).cpu()
    assert inductor_async.STATS["guarded"] == before["guarded"]
    assert inductor_async.may_raise("TORCH_CHECK((0 <= tmp2) && (tmp2 < 10L), ...)")
    assert not inductor_async.may_raise("auto tmp1 = tmp0.sin(); // module_mod")


def test_switch_off_calls_directly_and_changes_the_cache_key(monkeypatch):
    """TORCH_FL_INDUCTOR_ASYNC=0: kernels are called on the Python thread after a drain (the
    old path, kept for A/B), and inductor's cache key differs (the wrapper's code does)."""
    from torch_fl.jit import inductor_key

    on = inductor_key.digest()
    monkeypatch.setenv("TORCH_FL_INDUCTOR_ASYNC", "0")
    assert inductor_key.digest() != on
    fn = lambda a, b: (a @ b).sin() * 3  # noqa: E731
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    before = dict(inductor_async.STATS)
    torch.testing.assert_close(torch.compile(fn)(a.to("ral:0"), b.to("ral:0")).cpu(), fn(a, b), **TOL)
    assert inductor_async.STATS["launched"] == before["launched"]
    assert inductor_async.STATS["direct"] > before["direct"]
