"""Capability: random numbers on a ral device are reproducible with torch.manual_seed."""

import torch
from conftest import assert_close


def test_manual_seed_reproduces(dev):
    torch.manual_seed(123)
    a = torch.randn(1000, device=dev)
    u = torch.rand(50, device=dev)
    torch.manual_seed(123)
    b = torch.randn(1000, device=dev)
    v = torch.rand(50, device=dev)
    assert_close(a, b.cpu(), rtol=0, atol=0)
    assert_close(u, v.cpu(), rtol=0, atol=0)
    torch.manual_seed(124)
    c = torch.randn(1000, device=dev)
    assert not torch.equal(a.cpu(), c.cpu())


def test_distribution_is_sane(dev):
    torch.manual_seed(0)
    x = torch.randn(200_000, device=dev).cpu()
    assert abs(x.mean().item()) < 0.01 and abs(x.std().item() - 1) < 0.01
    u = torch.rand(200_000, device=dev).cpu()
    assert 0 <= u.min().item() and u.max().item() < 1 and abs(u.mean().item() - 0.5) < 0.01
    keep = torch.nn.functional.dropout(torch.ones(100_000, device=dev), p=0.3).cpu()
    assert abs((keep > 0).float().mean().item() - 0.7) < 0.01
    assert torch.allclose(keep[keep > 0], torch.tensor(1 / 0.7))


def test_rng_state_roundtrip(dev):
    torch.manual_seed(7)
    state = torch.ral.get_rng_state(dev)
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(10, device=dev)
    torch.ral.set_rng_state(state, dev)
    b = torch.randn(10, device=dev)
    assert torch.equal(a.cpu(), b.cpu())


def test_dropout_training_reproducible(dev):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).to(dev)
    x = torch.randn(4, 8, device=dev)
    torch.manual_seed(5)
    a = model(x)
    torch.manual_seed(5)
    b = model(x)
    assert torch.equal(a.cpu(), b.cpu())
