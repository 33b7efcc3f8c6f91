"""Capability: ral_mode runs unmodified CPU code on a ral device."""

from __future__ import annotations

import copy
import gc
import threading
import weakref

import pytest
import torch
from conftest import assert_close

import torch_fl
from torch_fl import mode as mode_mod
from torch_fl.tensor.ral_tensor import RalTensor


def test_factories_and_results_land_on_device(dev):
    with torch_fl.ral_mode(dev):
        a = torch.ones(3, 4)
        b = torch.arange(4.0)
        c = a * b + torch.randn(3, 4) * 0
    for t in (a, b, c):
        assert type(t) is RalTensor and t.device == torch.device(dev)
    # usable after the block
    assert c.cpu().tolist() == [[0.0, 1.0, 2.0, 3.0]] * 3
    assert c.sum().item() == 18.0
    assert (c.numpy() == c.cpu().numpy()).all()
    assert "device='ral:" in repr(c)


def test_explicit_cpu_device_is_respected(dev):
    with torch_fl.ral_mode(dev):
        t = torch.zeros(2, device="cpu")
    assert t.device.type == "cpu"


def test_cpu_tensor_uploaded_once_until_it_changes(dev):
    x = torch.randn(64, 64)
    with torch_fl.ral_mode(dev):
        before = dict(mode_mod.stats)
        y1 = x @ x
        y2 = x + 1
        assert mode_mod.stats["uploads"] - before["uploads"] == 1
        x.add_(1)  # in-place on a CPU tensor: runs on CPU, bumps its version
        y3 = x * 2
        assert mode_mod.stats["uploads"] - before["uploads"] == 2
    assert_close(y3, x * 2)
    assert_close(y1, (x - 1) @ (x - 1), rtol=1e-4, atol=1e-4)
    assert_close(y2, x)


def test_upload_cache_does_not_keep_dead_tensors(dev, young_gc):
    x = torch.randn(32)
    ref = weakref.ref(x)
    with torch_fl.ral_mode(dev):
        (x * 2).sum()
    del x
    gc.collect()
    assert ref() is None


def test_training_cpu_model_in_mode(dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 3))
    ref = torch.nn.Sequential(*[m for m in __import__("copy").deepcopy(model)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    x, y = torch.randn(5, 8), torch.randint(0, 3, (5,))
    for step in range(3):
        with torch_fl.ral_mode(dev):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if step == 1:
                opt.step()  # inside the mode
        if step != 1:
            opt.step()  # outside the mode
        opt.zero_grad()
        loss_ref = torch.nn.functional.cross_entropy(ref(x), y)
        loss_ref.backward()
        opt_ref.step()
        opt_ref.zero_grad()
        assert_close(loss, loss_ref.detach(), rtol=1e-5, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.device.type == "cpu"
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_grads_land_on_cpu_and_only_changed_params_reupload(dev):
    model = torch.nn.Linear(4, 4)
    with torch_fl.ral_mode(dev):
        model(torch.randn(2, 4)).sum().backward()
        assert model.weight.grad.device.type == "cpu" and model.bias.grad.device.type == "cpu"
        with torch.no_grad():
            model.bias.add_(1)
        inp = torch.ones(2, 4, device="cpu")
        before = mode_mod.stats["uploads"]
        model(inp)
        # the new CPU input and the changed bias; the unchanged weight comes from the cache
        # (within one block: each block starts from fresh uploads, mode.py's freshness rule)
        assert mode_mod.stats["uploads"] - before == 2


@pytest.mark.parametrize("ctx", [torch.no_grad, torch.inference_mode])
def test_grad_modes(dev, ctx):
    model = torch.nn.Linear(6, 3)
    x = torch.randn(4, 6)
    with ctx(), torch_fl.ral_mode(dev):
        with torch_fl.coverage() as cov:
            out = model(x)
    assert type(out) is RalTensor
    assert_close(out, model(x).detach(), rtol=1e-5, atol=1e-5)
    assert sum(cov.counts.values()) > 0


def test_nested_modes_innermost_wins():
    if torch.ral.device_count() < 2:
        pytest.skip("needs two ral devices (e.g. host + OpenCL)")
    with torch_fl.ral_mode("ral:0"):
        with torch_fl.ral_mode("ral:1"):
            inner = torch.ones(2)
        outer = torch.ones(2)
    assert inner.device == torch.device("ral:1") and outer.device == torch.device("ral:0")


def test_mode_is_per_thread(dev):
    seen = {}

    def worker():
        seen["t"] = torch.ones(1).device.type

    with torch_fl.ral_mode(dev):
        th = threading.Thread(target=worker)
        th.start()
        th.join()
        here = torch.ones(1).device.type
    assert seen["t"] == "cpu" and here == "ral"


def test_exception_in_block_leaves_no_state(dev):
    with pytest.raises(ZeroDivisionError):
        with torch_fl.ral_mode(dev):
            assert torch.ones(2).device.type == "ral"
            raise ZeroDivisionError("raised inside the block")
    assert torch.ones(2).device.type == "cpu"
    assert torch._C._len_torch_function_stack() == 0


def test_unsupported_op_falls_back_correctly(dev):
    x = torch.randn(5, 5)
    with torch_fl.ral_mode(dev), torch_fl.coverage() as cov:
        out = torch.linalg.det(x)
    assert_close(out, torch.linalg.det(x), rtol=1e-4, atol=1e-5)
    assert any(tier != "vendor" for (_, tier) in cov.counts)


def test_bad_device_rejected_at_entry():
    with pytest.raises(ValueError, match="needs a ral device"):
        torch_fl.ral_mode("cpu")


def test_random_numbers_match_cpu_by_default(dev):
    torch.manual_seed(3)
    ref_model = torch.nn.Linear(6, 4)
    ref = [torch.rand(3), torch.randn(2, 2), torch.randint(0, 9, (5,)), torch.randperm(7)]
    ref_drop = torch.nn.functional.dropout(torch.ones(20), 0.5)
    torch.manual_seed(3)
    with torch_fl.ral_mode(dev):
        model = torch.nn.Linear(6, 4)  # parameters created on the device, CPU's init values
        got = [torch.rand(3), torch.randn(2, 2), torch.randint(0, 9, (5,)), torch.randperm(7)]
        drop = torch.nn.functional.dropout(torch.ones(20), 0.5)
    assert type(model.weight) is not torch.Tensor or model.weight.device.type == "ral"
    torch.testing.assert_close(model.weight.detach().cpu(), ref_model.weight.detach(), rtol=0, atol=0)
    for g, r in zip(got, ref):
        assert g.device.type == "ral"
        torch.testing.assert_close(g.cpu(), r, rtol=0, atol=0)
    torch.testing.assert_close(drop.cpu(), ref_drop, rtol=0, atol=0)


def test_device_rng_option(dev):
    with pytest.raises(ValueError, match="rng must be"):
        torch_fl.ral_mode(dev, rng="gpu")
    torch.manual_seed(3)
    with torch_fl.ral_mode(dev, rng="device"):
        a = torch.rand(1000)
    assert a.device.type == "ral" and 0 <= a.min().item() and a.max().item() < 1


def test_functions_mutating_cpu_buffers_write_back(dev):
    bn = torch.nn.BatchNorm1d(6)
    ref = __import__("copy").deepcopy(bn)
    x = torch.randn(8, 6)
    with torch_fl.ral_mode(dev):
        out = bn(x)
    expected = ref(x)
    assert_close(out, expected.detach(), rtol=1e-5, atol=1e-5)
    # the running statistics are CPU buffers that the op updates in place
    torch.testing.assert_close(bn.running_mean, ref.running_mean, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(bn.running_var, ref.running_var, rtol=1e-6, atol=1e-7)
    assert bn.num_batches_tracked.item() == 1


def test_gradient_accumulation_and_hooks_in_mode(dev):
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    ref = torch.nn.Linear(5, 3)
    ref.load_state_dict(model.state_dict())
    seen = []
    model.bias.register_hook(lambda g: seen.append(g.clone()))
    x1, x2 = torch.randn(4, 5), torch.randn(4, 5)
    for x in (x1, x2):  # no zero_grad in between: the second pass accumulates
        with torch_fl.ral_mode(dev):
            model(x).pow(2).sum().backward()
        ref(x).pow(2).sum().backward()
    torch.testing.assert_close(model.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.bias.grad, ref.bias.grad, rtol=1e-5, atol=1e-6)
    assert len(seen) == 2 and seen[0].device.type == "cpu"


def test_gradients_come_home_complete_for_every_consumer(dev):
    """Gradient copies to CPU are asynchronous (torch_fl/grad_home.py); everything that reads
    a CPU parameter's gradient must still see final values: accumulation of a parameter used
    several times (tied weights), an existing .grad, tensor hooks, post-accumulate hooks and
    torch.autograd.grad. Large enough that a copy still in flight would be caught."""
    torch.manual_seed(0)
    emb = torch.randn(512, 256, requires_grad=True)  # tied: embedding and output projection
    proj = torch.randn(256, 256, requires_grad=True)
    ids = torch.randint(0, 512, (64,))
    ref_emb, ref_proj = emb.detach().clone().requires_grad_(), proj.detach().clone().requires_grad_()

    def loss_of(e, p):
        h = torch.nn.functional.embedding(ids, e) @ p
        return torch.tanh(h @ e.t()).pow(2).mean() + (h * h).mean()

    seen, after = [], []
    emb.register_hook(lambda g: seen.append(g.clone()))
    emb.register_post_accumulate_grad_hook(lambda p: after.append(p.grad.clone()))
    emb.grad = torch.full_like(emb, 0.5)  # accumulated onto, not replaced
    ref_emb.grad = torch.full_like(ref_emb, 0.5)
    for _ in range(2):
        with torch_fl.ral_mode(dev):
            loss_of(emb, proj).backward()
        loss_of(ref_emb, ref_proj).backward()
    torch.testing.assert_close(emb.grad, ref_emb.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(proj.grad, ref_proj.grad, rtol=1e-4, atol=1e-6)
    assert len(seen) == 2 and len(after) == 2
    torch.testing.assert_close(after[1], ref_emb.grad, rtol=1e-4, atol=1e-6)
    with torch_fl.ral_mode(dev):
        g_emb, g_proj = torch.autograd.grad(loss_of(emb, proj), (emb, proj))
    w_emb, w_proj = torch.autograd.grad(loss_of(ref_emb, ref_proj), (ref_emb, ref_proj))
    assert g_emb.device.type == "cpu"
    torch.testing.assert_close(g_emb, w_emb, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(g_proj, w_proj, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(seen[0], seen[1], rtol=1e-4, atol=1e-6)  # same inputs both passes


def test_abandoned_backward_leaves_nothing_in_flight(dev):
    """An error midway through backward: gradient buffers whose copies were enqueued are
    held until a synchronization covers them, and the next backward works."""
    from torch_fl.tensor import grad_home

    w = torch.randn(64, 64, requires_grad=True)
    v = torch.randn(64, 64, requires_grad=True)
    with torch_fl.ral_mode(dev):
        h = (w @ w).tanh()
        h.register_hook(lambda g: (_ for _ in ()).throw(RuntimeError("hook refused")))
        loss = (h @ v).sum() + (v * 2).sum()
        with pytest.raises(RuntimeError, match="hook refused"):
            loss.backward()
    assert w.grad is None
    with torch_fl.ral_mode(dev):
        (w @ v).sum().backward()
    w_ref = w.detach().clone().requires_grad_()
    (w_ref @ v.detach()).sum().backward()
    torch.testing.assert_close(w.grad, w_ref.grad, rtol=1e-5, atol=1e-5)
    assert not any(grad_home._in_flight.values()), "a synchronization did not release held buffers"


def test_a_wait_covers_every_copy_enqueued_before_it(dev, monkeypatch):
    """Gradient copies home: the first wait synchronizes the stream once and releases every
    buffer enqueued before it; a later wait for one of those returns without synchronizing."""
    from torch_fl.tensor import grad_home

    waits = []
    real = grad_home.synchronize_stream
    monkeypatch.setattr(grad_home, "synchronize_stream", lambda *a: (waits.append(a), real(*a))[1])
    grads = [torch.randn(32, 32).to(dev) * (i + 1) for i in range(3)]
    bufs = [grad_home._Upload.backward(None, g)[0] for g in grads]  # three copies enqueued
    for buf, g in zip(bufs, grads):
        grad_home._Await.backward(None, buf)
        torch.testing.assert_close(buf, g.cpu(), rtol=0, atol=0)
    assert len(waits) == 1, waits
    assert not any(grad_home._in_flight.values())


def test_gradients_come_home_right_with_fewer_waits_than_gradients(dev, monkeypatch):
    """A backward over many CPU parameters in ral_mode: values against CPU, and never more
    waits than gradients (the exact count depends on how the two autograd threads interleave)."""
    from torch_fl.tensor import grad_home

    waits = []
    real = grad_home.synchronize_stream
    monkeypatch.setattr(grad_home, "synchronize_stream", lambda *a: (waits.append(a), real(*a))[1])
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 16) for _ in range(12)]
    x = torch.randn(4, 16)

    def loss_of(mods):
        h = x
        for m in mods:
            h = torch.tanh(m(h))
        return h.sum()

    ref = [copy.deepcopy(m) for m in layers]
    loss_of(ref).backward()
    with torch_fl.ral_mode(dev):
        loss_of(layers).backward()
    for m, r in zip(layers, ref):
        torch.testing.assert_close(m.weight.grad, r.weight.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(m.bias.grad, r.bias.grad, rtol=1e-5, atol=1e-6)
    assert 1 <= len(waits) <= 24
    assert not any(grad_home._in_flight.values())


@pytest.mark.parametrize(
    "call",
    [
        lambda x, rm, rv: torch.nn.functional.batch_norm(x, rm, rv, training=True, momentum=0.3),
        lambda x, rm, rv: torch.batch_norm(x, None, None, rm, rv, True, 0.3, 1e-5, False),
        lambda x, rm, rv: torch.native_batch_norm(x, None, None, rm, rv, True, 0.3, 1e-5)[0],
        lambda x, rm, rv: torch._native_batch_norm_legit(x, None, None, rm, rv, True, 0.3, 1e-5)[0],
        lambda x, rm, rv: torch.nn.functional.instance_norm(x, rm, rv, momentum=0.3),
    ],
    ids=["F.batch_norm", "torch.batch_norm", "native_batch_norm", "_native_batch_norm_legit", "F.instance_norm"],
)
def test_every_norm_entry_point_writes_running_stats_home(dev, call):
    """Running statistics are updated without a visible in-place op; each entry point must
    write them back to the CPU tensors (and keep the cached twin current), twice in a row."""
    torch.manual_seed(0)
    rm, rv = torch.zeros(3), torch.ones(3)
    ref_m, ref_v = rm.clone(), rv.clone()
    for _ in range(2):
        x = torch.randn(4, 3, 5)
        with torch_fl.ral_mode(dev):
            out = call(x, rm, rv)
        want = call(x, ref_m, ref_v)
        assert_close(out, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(rm, ref_m, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(rv, ref_v, rtol=1e-6, atol=1e-6)
    with torch_fl.ral_mode(dev):  # eval with the stats: the device twin must be current
        out = torch.nn.functional.batch_norm(x, rm, rv, training=False)
    assert_close(out, torch.nn.functional.batch_norm(x, ref_m, ref_v, training=False), rtol=1e-5, atol=1e-5)


def test_double_backward_through_uploads(dev):
    """create_graph=True (a gradient penalty): the gradient's way home is differentiable."""
    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    x = torch.randn(5, 8)

    def penalty(w, b):
        y = torch.tanh(x @ w + b).pow(2).sum()
        gw, gb = torch.autograd.grad(y, (w, b), create_graph=True)
        return gw.pow(2).sum() + gb.pow(2).sum()

    want = torch.autograd.grad(penalty(w, b), (w, b))
    with torch_fl.ral_mode(dev):
        got = torch.autograd.grad(penalty(w, b), (w, b))
    for g, r in zip(got, want):
        assert g.device.type == "cpu"
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def test_two_threads_train_at_once(dev):
    """Two threads each run ral_mode backward passes on one device: the gradient copies of
    both share the device's stream and must each land complete before use."""
    results, errors = {}, []

    def train(seed):
        try:
            torch.manual_seed(seed)
            model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 8))
            ref = __import__("copy").deepcopy(model)
            x = torch.randn(32, 64)
            for _ in range(5):
                with torch_fl.ral_mode(dev):
                    model(x).pow(2).mean().backward()
                ref(x).pow(2).mean().backward()
            results[seed] = [(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters())]
        except Exception as exc:  # surfaced below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=train, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for pairs in results.values():
        for got, want in pairs:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert len(results) == 2
