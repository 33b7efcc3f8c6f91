"""ral_mode keeps CPU semantics for state a CPU tensor owns: in-place ops through views,
foreach ops, set_, resize_, version counters and autograd hooks land on the CPU tensor,
so gradient clipping, GradScaler and optimizers behave as without the mode (ral:0, ral:1)."""

import contextlib

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
pytestmark = pytest.mark.parametrize("dev", DEVICES)


def test_inplace_through_views_reaches_cpu_tensor(dev):
    t, w = torch.ones(4), torch.ones(3, 3)
    with torch_fl.ral_mode(dev):
        t[1:].zero_()
        w[:, 0].mul_(5)
        w.diagonal().fill_(7)
    assert t.tolist() == [1, 0, 0, 0]
    assert w.tolist() == [[7, 1, 1], [5, 7, 1], [5, 1, 7]]


def _model_and_data():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)), torch.randn(5, 6)


@pytest.mark.parametrize("foreach", [False, True])
def test_clip_grad_norm_clips_cpu_grads(dev, foreach):
    ref, x = _model_and_data()
    m, _ = _model_and_data()
    (ref(x).sum() * 100).backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0, foreach=foreach)
    with torch_fl.ral_mode(dev):
        (m(x).sum() * 100).backward()
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0, foreach=foreach)
    torch.testing.assert_close(norm.cpu(), ref_norm, rtol=1e-5, atol=1e-5)
    for p, q in zip(m.parameters(), ref.parameters()):
        assert p.grad.device.type == "cpu"
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    total = torch.cat([p.grad.flatten() for p in m.parameters()]).norm()
    assert abs(total.item() - 1.0) < 1e-4


def test_grad_scaler_unscale_on_cpu_grads(dev):
    ref, x = _model_and_data()
    m, _ = _model_and_data()
    results = []
    for model, mode in ((ref, None), (m, dev)):
        scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ctx = torch_fl.ral_mode(mode) if mode else torch.enable_grad()
        with ctx:
            for _ in range(3):
                opt.zero_grad()
                scaler.scale(model(x).pow(2).mean()).backward()
                scaler.unscale_(opt)
                scaler.step(opt)  # the step leaves the unscaled gradients in .grad
                scaler.update()
        results.append(([p.grad.clone() for p in model.parameters()], [p.detach().clone() for p in model.parameters()]))
    (g_ref, p_ref), (g, p) = results
    for a, b in zip(g + p, g_ref + p_ref):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True),
        lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=True),
        lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=True),
        lambda ps: torch.optim.Adam(ps, lr=0.01, fused=True),
        lambda ps: torch.optim.AdamW(ps, lr=0.01, fused=True),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, fused=True),
    ],
    ids=["sgd_foreach", "adam_foreach", "adamw_foreach", "adam_fused", "adamw_fused", "sgd_fused"],
)
def test_foreach_and_fused_optimizers_update_cpu_params(dev, make_opt):
    ref, x = _model_and_data()
    m, _ = _model_and_data()
    for model, mode in ((ref, None), (m, dev)):
        opt = make_opt(list(model.parameters()))
        ctx = torch_fl.ral_mode(mode) if mode else torch.enable_grad()
        with ctx:
            for _ in range(3):
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        assert p.device.type == "cpu"
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5)


def test_foreach_ops_mutate_cpu_lists(dev):
    a = [torch.arange(3.0), torch.arange(2.0)]
    with torch_fl.ral_mode(dev):
        torch._foreach_mul_(a, 3.0)
        torch._foreach_add_(a, [torch.ones(3), torch.ones(2)])
        torch._foreach_lerp_(a, [torch.zeros(3), torch.zeros(2)], 0.5)
    assert [x.tolist() for x in a] == [[0.5, 2.0, 3.5], [0.5, 2.0]]


def test_set_resize_and_version_counter(dev):
    t = torch.zeros(4)
    src = torch.arange(6.0)
    r = torch.zeros(2)
    with torch_fl.ral_mode(dev):
        v0 = t._version
        t.add_(1)
        assert t._version == v0 + 1
        r.resize_(5)
        assert r.shape == (5,) and r.device.type == "cpu"
        t.set_(src)
        t[0] = 10
    assert t.device.type == "cpu" and src[0].item() == 10 and t.data_ptr() == src.data_ptr()


def test_autograd_hooks_fire_on_cpu_tensors(dev):
    w = torch.nn.Parameter(torch.ones(3))
    seen, accumulated = [], []
    w.register_hook(lambda g: seen.append(g.device.type) or g * 2)
    w.register_post_accumulate_grad_hook(lambda p: accumulated.append(p.grad.clone()))
    with torch_fl.ral_mode(dev):
        (w * torch.arange(3.0)).sum().backward()
    assert seen == ["cpu"]
    assert w.grad.device.type == "cpu" and w.grad.tolist() == [0.0, 2.0, 4.0]
    assert accumulated[0].tolist() == [0.0, 2.0, 4.0]


def _grad_case():
    torch.manual_seed(3)
    x = torch.randn(4, 6, requires_grad=True)
    return x, torch.randn(4, 6), torch.randn(4, 6)


def _outputs(x):
    return torch.relu(x) * 2, torch.tanh(x)


@pytest.mark.parametrize("entry", ["Tensor.backward", "autograd.grad", "autograd.backward", "grad_kwarg"])
def test_cpu_gradients_for_device_outputs(dev, entry):
    """A CPU gradient given for an output the mode made on the device (`out.backward(g)`,
    `autograd.grad(outs, xs, gs)`, `autograd.backward(outs, gs)`) is uploaded beside it, so the
    result is CPU's instead of a device mismatch inside the backward."""
    results = []
    for mode in (False, True):
        x, g1, g2 = _grad_case()
        ctx = torch_fl.ral_mode(dev) if mode else contextlib.nullcontext()
        with ctx:
            y1, y2 = _outputs(x)
            if entry == "Tensor.backward":
                y1.backward(g1)
                got = x.grad
            elif entry == "autograd.grad":
                (got,) = torch.autograd.grad([y1, y2], [x], [g1, g2])
            elif entry == "autograd.backward":
                torch.autograd.backward([y1, y2], [g1, g2])
                got = x.grad
            else:
                (got,) = torch.autograd.grad(outputs=y1, inputs=x, grad_outputs=g1)
        results.append(got.cpu())
    torch.testing.assert_close(results[1], results[0], rtol=1e-6, atol=1e-6)


def test_cpu_gradient_requiring_grad_for_double_backward(dev):
    """create_graph with a CPU gradient that requires grad: the derivative reaches that
    gradient (the upload is differentiable), as without the mode."""
    results = []
    for mode in (False, True):
        x, g, _ = _grad_case()
        g.requires_grad_()
        if mode:
            with torch_fl.ral_mode(dev):
                (gx,) = torch.autograd.grad(torch.tanh(x), x, g, create_graph=True)
                (gx * gx).sum().backward()
        else:
            (gx,) = torch.autograd.grad(torch.tanh(x), x, g, create_graph=True)
            (gx * gx).sum().backward()
        assert g.grad is not None and g.grad.device.type == "cpu"
        results.append((gx.detach().cpu(), g.grad, x.grad))
    for a, e in zip(results[1], results[0]):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)
