"""Capability: the per-op caches of the dispatch fast path give the same numbers as CPU.

The caches (op lookup by id, uploaded scalar operands, ral_mode's upload cache keyed by id)
trade per-call work for lookups; each test calls the same op in the ways that must not
share a cached answer and compares with PyTorch CPU (exact for these ops, or as stated).
"""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import torch
from conftest import assert_close, run_python

import torch_fl
from torch_fl import mode as mode_mod
from torch_fl.tiers import vendor


def test_same_op_with_other_strides_dtypes_inplace_and_out(dev):
    torch.manual_seed(0)
    a, b = torch.randn(6, 5), torch.randn(6, 5)
    ad, bd = a.to(dev), b.to(dev)
    assert_close(torch.add(ad, bd), a + b, rtol=0, atol=0)
    assert_close(torch.add(ad.t(), bd.t()), a.t() + b.t(), rtol=0, atol=0)  # other strides
    assert_close(torch.add(ad[:, 1:], bd[:, :-1]), a[:, 1:] + b[:, :-1], rtol=0, atol=0)  # offsets
    assert_close(torch.add(ad.double(), bd.double()), a.double() + b.double(), rtol=0, atol=0)
    assert torch.add(ad.double(), bd).dtype == torch.float64
    out = torch.empty(6, 5).to(dev)
    torch.add(ad, bd, out=out)
    assert_close(out, a + b, rtol=0, atol=0)
    c, cd = a.clone(), ad.clone()
    cd.add_(bd, alpha=2)
    c.add_(b, alpha=2)
    assert_close(cd, c, rtol=0, atol=0)
    cd.add_(bd, alpha=3)  # same signature, other scalar value: not baked into the plan
    c.add_(b, alpha=3)
    assert_close(cd, c, rtol=0, atol=0)


def test_scalar_operands_keep_value_type_and_sign(dev):
    x = torch.tensor([1.0, -2.0, 3.5, 0.0])
    xd = x.to(dev)
    for s in (0.5, 0.5, 2.0, 2, True, -0.0, 0.0, -0.0, 1e-30, 1e30):
        got, want = xd * s, x * s
        assert got.dtype == want.dtype
        assert_close(got, want, rtol=0, atol=0)
        assert torch.equal(torch.signbit(got.cpu()), torch.signbit(want)), s  # -0.0 is not 0.0
    nan = (xd + float("nan")).cpu()
    assert torch.isnan(nan).all()
    i, idev = torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]).to(dev)
    for s in (2, 2.0, True, 2, 2.5):  # int vs float vs bool with equal values: other dtypes
        got, want = idev * s, i * s
        assert got.dtype == want.dtype, s
        assert_close(got, want, rtol=0, atol=0)


def test_cpu_zero_dim_operands_cast_like_cpu(dev):
    x = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float32)
    xd = x.to(dev)
    for t in (torch.tensor(1.1, dtype=torch.float64), torch.tensor(1.1), torch.tensor(3), torch.tensor(True)):
        for _ in range(2):
            got, want = torch.mul(xd, t), torch.mul(x, t)
            assert got.dtype == want.dtype
            assert_close(got, want, rtol=0, atol=0)
    m = torch.tensor([True, False, True])
    for fill in (-1e9, -1e9, 7.0):
        assert_close(torch.where(m.to(dev), xd, torch.tensor(fill)), torch.where(m, x, torch.tensor(fill)))


def test_scalar_cache_is_bounded_and_stays_right(dev):
    x = torch.arange(4.0)
    xd = x.to(dev)
    for k in range(vendor._SCALARS_MAX + 20):
        assert_close(xd + float(k), x + k, rtol=0, atol=0)
    assert len(vendor._SCALARS) <= vendor._SCALARS_MAX


def test_scalar_operands_on_a_side_stream(dev):
    x = torch.randn(1000)
    xd = x.to(dev)
    s = torch.ral.Stream(device=dev)
    want = x * 0.25 + 3.0
    with torch.ral.stream(s):
        got = xd * 0.25 + 3.0
    s.synchronize()
    assert_close(got, want, rtol=0, atol=0)


def test_threads_with_different_scalars(dev):
    x = torch.randn(257)
    xd = x.to(dev)
    errors = []

    def work(k):
        try:
            for j in range(30):
                s = float(k * 100 + j % 5)
                assert_close(xd * s, x * s, rtol=0, atol=0)
        except Exception as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_mode_upload_cache_forgets_dead_tensors_and_reused_ids(dev, young_gc):
    n0 = len(mode_mod._CACHE)
    results = []
    for k in range(5):
        x = torch.full((8,), float(k))  # a fresh tensor each round, often at a reused id
        with torch_fl.ral_mode(dev):
            results.append(x * 2)
        ref = weakref.ref(x)
        del x
        gc.collect()
        assert ref() is None  # the cache holds no CPU tensor
    for k, r in enumerate(results):
        assert_close(r, torch.full((8,), 2.0 * k), rtol=0, atol=0)
    assert len(mode_mod._CACHE) <= n0


def test_mode_upload_cache_hits_and_version_changes(dev):
    w = torch.randn(4, 4)
    with torch_fl.ral_mode(dev):
        before = mode_mod.stats["uploads"]
        y1 = w * 1.0
        y2 = w * 1.0
        assert mode_mod.stats["uploads"] - before == 1
        with torch.no_grad():
            w.mul_(3)  # runs on CPU and bumps the version: the next use uploads anew
        y3 = w * 1.0
        assert mode_mod.stats["uploads"] - before == 2
    assert_close(y1, y2.cpu(), rtol=0, atol=0)
    assert_close(y3, w, rtol=0, atol=0)


def test_special_handler_registered_after_first_use_is_seen():
    code = """
import torch, torch_fl
from torch_fl.dispatch.special import special, ROUTE
x = torch.randn(3).to('ral:0')
torch.neg(x)  # the entry point caches what it knows of aten.neg
seen = []
@special(torch.ops.aten.neg.default)
def spy(func, args, kwargs):
    seen.append(func)
    return ROUTE
y = torch.neg(x)
assert seen == [torch.ops.aten.neg.default], seen
assert torch.equal(y.cpu(), -x.cpu())
print('ok')
"""
    r = run_python(code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_specials_that_route_by_signature_are_fast_cached_and_stay_right():
    """A handler marked `routes_by_signature` is skipped once its key routed (any.dims with
    [] reduces nothing, with [0] it reduces; a uint8 `where` condition is widened, a bool one
    routed); an unmarked handler is asked on every call."""
    code = """
import torch, torch_fl
from torch_fl.dispatch import entry
from torch_fl.dispatch.special import special, ROUTE
a = torch.tensor([[1, 0, 0], [0, 0, 0]], dtype=torch.uint8)
x, y = torch.arange(3.0), -torch.arange(3.0)
for dev in ("ral:0", "ral:1")[: torch.ral.device_count()]:
    ra = a.to(dev)
    for dims in ([0], [], [1], [], [0, 1], [0]):
        for _ in range(2):
            got = torch.ops.aten.any.dims(ra, dims)
            assert torch.equal(got.cpu(), torch.ops.aten.any.dims(a, dims)), (dev, dims)
    for dtype in (torch.bool, torch.uint8, torch.bool, torch.uint8):
        c = torch.tensor([1, 0, 1], dtype=dtype)
        for _ in range(2):
            assert torch.equal(torch.where(c.to(dev), x.to(dev), y.to(dev)).cpu(), torch.where(c, x, y))
cached = {k[0] for k in entry._FAST}
assert id(torch.ops.aten.where.self) in cached and id(torch.ops.aten.any.dims) in cached
seen = []
@special(torch.ops.aten.neg.default)
def spy(func, args, kwargs):
    seen.append(func)
    return ROUTE
r = torch.arange(3.0).to("ral:0")
for _ in range(3):
    assert torch.equal(torch.neg(r).cpu(), -torch.arange(3.0))
assert len(seen) == 3, seen
print('ok')
"""
    r = run_python(code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_strided_operands_with_the_same_shape_do_not_share_a_plan(dev):
    # Same shapes and dtype, different strides and offsets: each call must read its own layout.
    torch.manual_seed(1)
    base = torch.randn(8, 16)
    bd = base.to(dev)
    views = [
        lambda t: t[:, :8].t(),  # (8, 8), strides (1, 16)
        lambda t: t[:, 8:].t(),  # same strides, other offset
        lambda t: t[:, ::2],  # strides (16, 2)
        lambda t: t.t()[:8],  # strides (1, 16) again, offset 0
        lambda t: t[:, 1:9],  # strides (16, 1): not contiguous, offset 1
    ]
    for f in views + views[::-1]:
        a, ad = f(base), f(bd)
        assert_close(torch.mm(ad, ad), a @ a, rtol=1e-5, atol=1e-5)
        assert_close(ad * 0.5 + ad, a * 0.5 + a, rtol=0, atol=0)
        assert_close(torch.nn.functional.linear(ad, ad), torch.nn.functional.linear(a, a), rtol=1e-5, atol=1e-5)
        c, cd = a.clone(), ad.clone()
        cd.mul_(torch.tensor(-1.5))  # in place, CPU 0-dim operand
        c.mul_(torch.tensor(-1.5))
        assert_close(cd, c, rtol=0, atol=0)


@pytest.mark.parametrize("dev", [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))])
def test_plans_that_differ_in_shape_share_generated_code(dev):
    # A growing KV cache makes a new plan per decoded token: the generated call function's
    # code is compiled once for the op's structure, each plan binding its own sizes.
    torch.manual_seed(2)
    new = torch.randn(1, 3, 1, 8)
    before = len(vendor._CODE)
    made = vendor._SPECIALIZED
    kv, kvd = torch.randn(1, 3, 1, 8), None
    kvd = kv.to(dev)
    for _ in range(6):
        kv, kvd = torch.cat([kv, new], dim=-2), torch.cat([kvd, new.to(dev)], dim=-2)
        assert kvd.shape == kv.shape
        assert_close(kvd, kv, rtol=0, atol=0)  # each plan writes its own length
    assert vendor._SPECIALIZED - made >= 6  # six shapes, six plans
    assert len(vendor._CODE) - before <= 1  # one compiled code object among them
