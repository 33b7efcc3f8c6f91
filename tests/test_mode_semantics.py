"""ral_mode keeps CPU semantics for state a CPU tensor owns: in-place ops through views,
foreach ops, set_, resize_, version counters and autograd hooks land on the CPU tensor,
so gradient clipping, GradScaler and optimizers behave as without the mode (ral:0, ral:1)."""

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
