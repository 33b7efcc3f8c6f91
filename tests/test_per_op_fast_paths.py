"""Capability: the per-op fast paths (issue 13) give CPU's numbers, geometry and errors.

The paths: the dispatcher's positional cache keyed on the arguments (dispatch/entry.py),
the straight-line per-plan launch function (tiers/vendor.py `_specialize`), exact cached
view calls (tensor/views.py `cached_view_call`), `.item()` through a C cell
(tensor/host_copy.py `item`) and ral_mode's cached-operand path (mode.py
`_compute_cached`). Each test runs the same op repeatedly (so the second call takes the
fast path) in the ways that must not share a cached answer, and compares with PyTorch CPU:
exact (rtol=0, atol=0) for adds, copies and views; rtol=atol=1e-5 for matmuls.
"""

from __future__ import annotations

import threading

import pytest
import torch
from conftest import assert_close

import torch_fl
from torch_fl.dispatch import entry, router
from torch_fl.tiers import vendor


def _twice(fn):
    """Call fn twice (slow path, then the cached fast path); return both results."""
    return fn(), fn()


def test_int_and_float_scalars_do_not_share_an_entry(dev):
    # 1 and 1.0 hash alike; an int tensor + 1 stays int64, + 1.0 becomes float32.
    x = torch.arange(6)
    xd = x.to(dev)
    for _ in range(2):
        r_int = torch.add(xd, 1)
        r_float = torch.add(xd, 1.0)
        assert r_int.dtype == torch.int64 and r_float.dtype == torch.float32
        assert_close(r_int, x + 1, rtol=0, atol=0)
        assert_close(r_float, x + 1.0, rtol=0, atol=0)
    assert_close(torch.add(xd, 2, alpha=3), torch.add(x, 2, alpha=3), rtol=0, atol=0)


def test_repeated_ops_strided_offset_and_zero_dim_operands(dev):
    torch.manual_seed(0)
    a, b = torch.randn(6, 5), torch.randn(6, 5)
    s = torch.tensor(2.5)
    ad, bd, sd = a.to(dev), b.to(dev), s.to(dev)
    cases = [
        (lambda x, y, z: torch.add(x, y), (a, b, s)),
        (lambda x, y, z: torch.mul(x.t(), y.t()), (a, b, s)),  # strided operands
        (lambda x, y, z: torch.sub(x[1:, 2:], y[:-1, :-2]), (a, b, s)),  # offsets
        (lambda x, y, z: torch.mul(x, z), (a, b, s)),  # 0-dim device operand
        (lambda x, y, z: torch.add(z, z), (a, b, s)),  # 0-dim result
        (lambda x, y, z: x * 0.5, (a, b, s)),  # Python scalar operand
        (lambda x, y, z: x.sum(), (a, b, s)),
        (lambda x, y, z: x.sum(1), (a, b, s)),
    ]
    for fn, (x, y, z) in cases:
        want = fn(x, y, z)
        for got in _twice(lambda fn=fn: fn(ad, bd, sd)):
            assert got.shape == want.shape and got.dtype == want.dtype
            assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_inplace_on_the_fast_path_returns_the_argument(dev):
    a = torch.zeros(4, 3)
    ad = a.to(dev)
    one = torch.ones(4, 3).to(dev)
    for _ in range(3):
        out = ad.add_(one)
        assert out is ad
        a.add_(1)
    assert_close(ad, a, rtol=0, atol=0)
    col = ad[:, 1]  # a strided in-place target
    for _ in range(2):
        col.mul_(2.0)
        a[:, 1].mul_(2.0)
    assert_close(ad, a, rtol=0, atol=0)


def test_linear_with_transposed_weight_matches_cpu(dev):
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    lin_d = torch.nn.Linear(64, 32).to(dev)
    lin_d.load_state_dict(lin.state_dict())
    xd = x.to(dev)
    with torch.no_grad():
        want = lin(x)
        for got in _twice(lambda: lin_d(xd)):
            assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert lin_d(xd).sum().item() == pytest.approx(want.sum().item(), rel=1e-5, abs=1e-4)


def test_views_keep_cpu_strides_including_size_one_dims(dev):
    # A contiguous tensor's size-1 dims may carry any stride; its view's strides must be
    # CPU's for each base, not one cached for the first base with the same signature.
    base = torch.arange(4.0)
    for st in (100, 4, 7):
        c = base.as_strided((1, 4), (st, 1))
        d = base.to(dev).as_strided((1, 4), (st, 1))
        for got in _twice(lambda d=d: d.t()):
            assert got.stride() == c.t().stride()
            assert_close(got, c.t(), rtol=0, atol=0)
    x = torch.randn(5, 6)
    xd = x.to(dev)
    for fn in (
        lambda t: t.t(),
        lambda t: t[1:].t(),
        lambda t: t[:, 2:].transpose(0, 1),
        lambda t: t.view(3, 10),
        lambda t: t[2:].reshape(18),
        lambda t: t.unsqueeze(0),
        lambda t: t.t()[1:],
    ):
        want = fn(x)
        for got in _twice(lambda fn=fn: fn(xd)):
            assert got.shape == want.shape and got.stride() == want.stride()
            assert got.storage_offset() == want.storage_offset()
            assert_close(got, want, rtol=0, atol=0)


def _fast_calls_named(name):
    return [hit[1] for hit in entry._FAST.values() if getattr(hit[1], "__name__", "") == name]


def test_views_of_size_one_dims_and_splits_are_cached_per_strides(dev):
    # Batch-1 decoding: every activation has size-1 dims, whose strides the routing
    # signature does not hold. The cached view call (views.cached_view_call) must
    # give each base CPU's geometry and values, also for a base with the same shape but
    # other strides in its size-1 dims, and for views with several results.
    entry._FAST.clear()
    base = torch.arange(2304.0)
    cases = [
        lambda t: t.view(-1, 768),
        lambda t: t.view(1, 1, 3, 768).transpose(1, 2),
        lambda t: t.view(1, 1, 3, 768).transpose(2, 3),  # not contiguous
        lambda t: t.view(1, 1, 3, 768).permute(3, 0, 2, 1).unbind(0),
        lambda t: t.split(768, dim=2),
        lambda t: t.unbind(0),
        lambda t: t.chunk(4, dim=-1),
    ]
    for fn in cases:
        for st in (2304, 1, 5, 2304):  # the first stride twice: the cached call is hit again
            c = base.as_strided((1, 1, 2304), (st, st, 1))
            d = base.to(dev).as_strided((1, 1, 2304), (st, st, 1))
            assert d.is_contiguous()
            want = fn(c)
            for got in _twice(lambda d=d, fn=fn: fn(d)):
                for g, w in zip(got, want) if isinstance(want, (list, tuple)) else ((got, want),):
                    assert g.shape == w.shape and g.stride() == w.stride()
                    assert g.storage_offset() == w.storage_offset()
                    assert_close(g, w, rtol=0, atol=0)
                    if g._sig is not None:  # a routing signature set ahead must be the computed one
                        sig, g._sig = g._sig, None
                        assert entry.tensor_sig(g) == sig
    # the fast path is the one taken (not the general view cache)
    assert _fast_calls_named("cached_view") and _fast_calls_named("cached_views")
    # an offset base (a slice) keeps its offset on the cached path
    x = torch.randn(4, 1, 3072)
    xd = x.to(dev)
    for i in range(4):
        want = x[i : i + 1].split(768, dim=2)
        for got in _twice(lambda i=i: xd[i : i + 1].split(768, dim=2)):
            for g, w in zip(got, want):
                assert g.storage_offset() == w.storage_offset() and g.stride() == w.stride()
                assert_close(g, w, rtol=0, atol=0)
    # ral_mode: activations are device tensors, their views take the same cached calls
    h = torch.randn(1, 1, 2304)
    want_q = h.split(768, dim=2)[0].view(1, 1, 12, 64).transpose(1, 2)
    want_v = h.split(768, dim=2)[2]
    with torch_fl.ral_mode(dev):
        for _ in range(2):
            q, k, v = (h * 1.0).split(768, dim=2)
            qh = q.view(1, 1, 12, 64).transpose(1, 2)
            assert qh.device.type == "ral" and qh.stride() == want_q.stride()
            assert_close(qh, want_q, rtol=0, atol=0)
            assert_close(v, want_v, rtol=0, atol=0)


def test_tensor_lists_on_the_fast_path_match_cpu(dev):
    # cat/stack of RalTensors are keyed by each element's signature (entry._fast_key): a
    # growing KV cache, strided and offset elements, a third element, mixed dtypes, and a
    # list with a CPU scalar (not keyed) must each get CPU's result on every call.
    entry._FAST.clear()
    k = torch.randn(1, 12, 5, 64)
    kd = k.to(dev)
    for _ in range(4):  # the KV cache pattern: the same call shape grows by one row
        new = torch.randn(1, 12, 1, 64)
        want = torch.cat([k, new], dim=-2)
        got = torch.cat([kd, new.to(dev)], dim=-2)
        assert got.shape == want.shape and got.stride() == want.stride()
        assert_close(got, want, rtol=0, atol=0)
        k, kd = want, got
    assert any(len(key) > 2 and key[1] is entry.RalTensor for key in entry._FAST)  # keyed, not refused
    a, b = torch.randn(6, 4), torch.randn(6, 4)
    ad, bd = a.to(dev), b.to(dev)
    cases = [
        lambda x, y: torch.cat([x, y]),
        lambda x, y: torch.cat([x, y], 1),
        lambda x, y: torch.cat([x.t(), y.t()], 1),  # strided elements
        lambda x, y: torch.cat([x[2:], y[1:3], x[:1]]),  # offsets, three elements
        lambda x, y: torch.cat([x, y.double()]),  # promotion across the list
        lambda x, y: torch.cat([x.to(torch.int32), y.to(torch.int32)]),
        lambda x, y: torch.stack([x, y, x], dim=1),
    ]
    for fn in cases:
        want = fn(a, b)
        for got in _twice(lambda fn=fn: fn(ad, bd)):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(RuntimeError):  # a shape mismatch still raises CPU's error type on a cached signature
        for _ in range(2):
            torch.cat([ad, torch.randn(6, 5).to(dev)])
    want = torch.cat([a, b], dim=-1)
    with torch_fl.ral_mode(dev):  # ral_mode: device activations in a list take the same key
        for _ in range(2):
            got = torch.cat([a * 1.0, b * 1.0], dim=-1)
            assert got.device.type == "ral"
            assert_close(got, want, rtol=0, atol=0)


def test_item_of_every_c_dtype_and_the_fallbacks(dev):
    cases = [
        torch.tensor(1.25, dtype=torch.float32),
        torch.tensor(-3.5, dtype=torch.float64),
        torch.tensor(2**40 + 3, dtype=torch.int64),
        torch.tensor(-7, dtype=torch.int32),
        torch.tensor(-9, dtype=torch.int16),
        torch.tensor(-5, dtype=torch.int8),
        torch.tensor(200, dtype=torch.uint8),
        torch.tensor(True),
        torch.tensor(False),
        torch.tensor([0.5]),  # one element, rank 1
        torch.tensor(1.5, dtype=torch.float16),  # no C type: through a CPU tensor
    ]
    for c in cases:
        if dev == "ral:1" and c.dtype in (torch.float64, torch.float16):
            continue  # ral:1 (OpenCL on PoCL) may lack these dtypes; covered on ral:0
        got = c.to(dev).item()
        assert type(got) is type(c.item()) and got == c.item(), c
    x = torch.arange(10.0)
    assert x.to(dev)[7].item() == 7.0  # an element at an offset
    assert x.to(dev).view(2, 5)[1, 3].item() == 8.0
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        x.to(dev).item()


def test_item_surfaces_an_asynchronous_kernel_error(dev):
    w = torch.randn(10, 4, device=dev)
    bad = torch.tensor([2**40], device=dev)
    with pytest.raises(IndexError):
        torch.index_select(w, 0, bad).sum().item()
    assert torch.ones(3, device=dev).sum().item() == 3.0  # the device keeps working


def test_plugin_errors_keep_their_type_on_the_fast_path(dev):
    w = torch.randn(10, 4, device=dev)
    good = torch.tensor([1, 2, 3], device=dev)
    bad = torch.tensor([1, 2, 2**40], device=dev)  # same signature as `good`
    for _ in range(2):
        torch.index_select(w, 0, good)
    for _ in range(2):
        with pytest.raises(IndexError):
            torch.index_select(w, 0, bad).cpu()
    assert_close(torch.index_select(w, 0, good), w.cpu()[[1, 2, 3]], rtol=0, atol=0)


def test_another_thread_uses_the_general_path_correctly(dev):
    a, b = torch.randn(64), torch.randn(64)
    ad, bd = a.to(dev), b.to(dev)
    torch.add(ad, bd)
    torch.add(ad, bd)  # plan owned by this thread
    results = []

    def work():
        results.append([torch.add(ad, bd) for _ in range(3)])

    th = threading.Thread(target=work)
    th.start()
    th.join()
    for r in results[0]:
        assert_close(r, a + b, rtol=0, atol=0)


def test_invalidating_decisions_clears_the_fast_cache(dev):
    a = torch.randn(8).to(dev)
    torch.neg(a)
    torch.neg(a)
    assert entry._FAST
    router.DECISIONS.clear()
    assert not entry._FAST
    try:
        router.set_op_override("aten::neg", "cpu")
        assert not entry._FAST
        assert_close(torch.neg(a), -a.cpu(), rtol=0, atol=0)
        key = entry._fast_key(torch.ops.aten.neg.default, (a,))
        assert entry._FAST[key][1].__self__.tier == "cpu"  # the forced tier serves it
    finally:
        router.clear_op_overrides()
    assert not entry._FAST


def test_specialized_plans_are_built(dev):
    before = vendor._SPECIALIZED
    x = torch.randn(3, 7).to(dev)
    torch.sigmoid(x)
    torch.sigmoid(x.t())  # a new signature, a new plan
    assert vendor._SPECIALIZED >= before + (2 if dev == "ral:0" else 0)


def test_ral_mode_cached_operands_follow_cpu_mutations(dev):
    torch.manual_seed(0)
    a, b = torch.randn(16), torch.randn(16)
    lin = torch.nn.Linear(16, 4)
    for _ in range(4):
        want = a + b  # CPU reference, outside the mode
        with torch_fl.ral_mode(dev):
            got = torch.add(a, b)
            assert got.device.type == "ral"
        assert_close(got, want, rtol=0, atol=0)
        a.mul_(1.5)  # bumps the version: the next call uploads anew
    with torch.no_grad():
        want = lin(a)
        for _ in range(2):
            with torch_fl.ral_mode(dev):
                got = lin(a)
            assert_close(got, want, rtol=1e-5, atol=1e-5)
    # a tensor that requires grad takes the differentiable upload: gradients come home
    w = torch.randn(16, requires_grad=True)
    for _ in range(2):
        w.grad = None
        with torch_fl.ral_mode(dev):
            (w * b).sum().backward()
        assert w.grad.device.type == "cpu"
        torch.testing.assert_close(w.grad, b, rtol=0, atol=0)


def test_random_ops_on_the_fast_path_advance_and_reseed(dev):
    # The generator slot of a cached plan takes a fresh Philox offset per call.
    x = torch.empty(1000, device=dev)
    torch.manual_seed(1)
    r1, r2 = x.normal_().clone(), x.normal_().clone()
    torch.manual_seed(1)
    r3, r4 = x.normal_().clone(), x.normal_().clone()
    assert not torch.equal(r1.cpu(), r2.cpu())
    assert_close(r3, r1.cpu(), rtol=0, atol=0)
    assert_close(r4, r2.cpu(), rtol=0, atol=0)
    assert abs(r1.cpu().mean().item()) < 0.2 and abs(r1.cpu().std().item() - 1) < 0.2


def test_bool_arguments_key_apart_from_ints(dev):
    x = torch.randn(4, 5)
    xd = x.to(dev)
    for _ in range(2):
        for keep in (True, False):
            got = torch.ops.aten.sum.dim_IntList(xd, [1], keep)
            want = torch.ops.aten.sum.dim_IntList(x, [1], keep)
            assert got.shape == want.shape
            assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_ral_mode_cached_lists_and_tensor_keywords(dev):
    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(2, 4)
    w, bias = torch.randn(4), torch.randn(4)
    want_cat = torch.cat([a, b])
    want_ln = torch.nn.functional.layer_norm(a, (4,), weight=w, bias=bias, eps=1e-5)
    for _ in range(3):  # first call uploads, later calls hit the cache
        with torch_fl.ral_mode(dev):
            got_cat = torch.cat([a, b])
            got_ln = torch.nn.functional.layer_norm(a, (4,), weight=w, bias=bias, eps=1e-5)
        assert_close(got_cat, want_cat, rtol=0, atol=0)
        assert_close(got_ln, want_ln, rtol=1e-5, atol=1e-5)
    b.add_(1.0)  # a list operand changed on CPU: uploaded anew
    with torch_fl.ral_mode(dev):
        got_cat = torch.cat([a, b])
    assert_close(got_cat, torch.cat([a, b]), rtol=0, atol=0)
