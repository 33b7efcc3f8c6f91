"""Every in-place torch._foreach_*_ op, and SGD/Adam/AdamW with foreach=True and fused=True
(where CPU supports them), on ral:0 and ral:1 in the `.to(dev)` style, compared with CPU.
Tolerance: float32 elementwise, rtol 1e-5 / atol 1e-6 (optimizers: 1e-4 / 1e-5 after 3 steps)."""

import pytest
import torch

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
FOREACH_INPLACE = sorted(n for n in dir(torch) if n.startswith("_foreach_") and n.endswith("_"))
SHAPES = [(3, 4), (5,), (2, 1, 3)]


def _lists(seed):
    g = torch.Generator().manual_seed(seed)
    # values in (0.2, 0.9): in the domain of log, sqrt, acos, asin ...
    return [torch.rand(s, generator=g) * 0.7 + 0.2 for s in SHAPES]


def _arg_patterns(name):
    """Argument lists after `self` to try, first one CPU accepts wins."""
    b, c = _lists(1), _lists(2)
    if name in ("_foreach_addcmul_", "_foreach_addcdiv_"):
        return [(b, c, 0.5), (b, c, [0.5, 2.0, -1.0]), (b, c)]
    if name == "_foreach_lerp_":
        return [(b, 0.3), (b, c)]
    if name == "_foreach_copy_":
        return [(b,)]
    return [(), (b,), (2.0,), ([0.5, 2.0, 3.0],), (torch.tensor(1.5),)]


def _to(v, dev):
    if isinstance(v, torch.Tensor):
        return v.to(dev)
    if isinstance(v, list):
        return [_to(x, dev) for x in v]
    return v


def _cases():
    out = []
    for name in FOREACH_INPLACE:
        for i, extra in enumerate(_arg_patterns(name)):
            try:
                getattr(torch, name)(_lists(0), *extra)
            except (RuntimeError, TypeError):
                continue
            out.append(pytest.param(name, i, id=f"{name}-{i}"))
    return out


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize(("name", "pattern"), _cases())
def test_foreach_inplace_matches_cpu(dev, name, pattern):
    extra = _arg_patterns(name)[pattern]
    expected = _lists(0)
    getattr(torch, name)(expected, *extra)
    actual = [t.to(dev) for t in _lists(0)]
    ids = [id(t) for t in actual]
    getattr(torch, name)(actual, *(_to(e, dev) for e in extra))
    assert [id(t) for t in actual] == ids
    for a, e in zip(actual, expected):
        assert a.device.type == "ral"
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-6)


def _fused_supported(cls):
    try:
        cls([torch.zeros(1, requires_grad=True)], fused=True)
    except (RuntimeError, ValueError):
        return False
    return True


OPTIMIZERS = [
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    (torch.optim.Adam, {"lr": 0.01}),
    (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("variant", ["foreach", "fused"])
@pytest.mark.parametrize(("cls", "kw"), OPTIMIZERS, ids=[c.__name__ for c, _ in OPTIMIZERS])
def test_optimizer_variants_train_on_device(dev, variant, cls, kw):
    if variant == "fused" and not _fused_supported(cls):
        pytest.skip(f"{cls.__name__}(fused=True) is not supported on CPU in this PyTorch")
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    model.load_state_dict(ref.state_dict())
    model.to(dev)
    x = torch.randn(5, 6)
    initial = [p.detach().clone() for p in ref.parameters()]
    for m, inp in ((ref, x), (model, x.to(dev))):
        opt = cls(m.parameters(), **kw, **{variant: True})
        for _ in range(3):
            opt.zero_grad()
            m(inp).pow(2).mean().backward()
            opt.step()
    for p, q, p0 in zip(model.parameters(), ref.parameters(), initial):
        assert p.device.type == "ral"
        assert not torch.equal(p.detach().cpu(), p0)  # it trained
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)
