"""Capability: autograd and training on a ral device match CPU."""

import copy

import pytest
import torch
from conftest import assert_close


class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, idx):
        h = self.norm(self.emb(idx)).mean(1)
        return self.fc2(torch.nn.functional.gelu(self.fc1(h)))


def test_backward_matches_cpu(dev):
    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(6, 3, requires_grad=True)
    xr = x.detach().to(dev).requires_grad_()
    wr = w.detach().to(dev).requires_grad_()
    loss = torch.tanh(x @ w).pow(2).sum()
    loss_r = torch.tanh(xr @ wr).pow(2).sum()
    loss.backward()
    loss_r.backward()
    assert_close(loss_r, loss, rtol=1e-5, atol=1e-5)
    assert_close(xr.grad, x.grad, rtol=1e-5, atol=1e-5)
    assert_close(wr.grad, w.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opt_name", ["SGD", "AdamW"])
def test_five_training_steps_match_cpu(dev, opt_name):
    torch.manual_seed(0)
    cpu_model = SmallNet()
    ral_model = copy.deepcopy(cpu_model).to(dev)
    make = {
        "SGD": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        "AdamW": lambda p: torch.optim.AdamW(p, lr=1e-2),
    }[opt_name]
    opt_c, opt_r = make(cpu_model.parameters()), make(ral_model.parameters())
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        idx = torch.randint(0, 50, (8, 7), generator=gen)
        target = torch.randint(0, 5, (8,), generator=gen)
        for model, opt, inp, tgt in ((cpu_model, opt_c, idx, target), (ral_model, opt_r, idx.to(dev), target.to(dev))):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inp), tgt)
            loss.backward()
            opt.step()
    for (name, pc), pr in zip(cpu_model.named_parameters(), ral_model.parameters()):
        assert pr.device.type == "ral", name
        torch.testing.assert_close(pr.detach().cpu(), pc.detach(), rtol=1e-5, atol=1e-6, msg=name)


def test_backward_on_second_device_needs_guard_shim():
    # The guard shim reports several devices so the autograd engine can run ral:N>0 backward.
    from conftest import run_python

    res = run_python(
        """
        import torch, torch_fl
        n = torch.ral.device_count()
        assert n >= 2, n
        x = torch.randn(5, requires_grad=True)
        xr = x.detach().to("ral:1").requires_grad_()
        (xr * xr).sum().backward()
        torch.testing.assert_close(xr.grad.cpu(), 2 * x.detach())
        print("OK", xr.grad.device)
        """,
        env={"RAL_HOST_DEVICE_COUNT": "2"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "OK ral:1" in res.stdout


def test_backward_across_two_devices():
    # The engine orders cross-device gradients with guard events (no-ops: our copies are synchronous).
    from conftest import run_python

    res = run_python(
        """
        import torch, torch_fl
        a = torch.randn(4, requires_grad=True); b = torch.randn(4, requires_grad=True)
        ra = a.detach().to("ral:0").requires_grad_(); rb = b.detach().to("ral:1").requires_grad_()
        loss = (ra * ra).sum() + (rb * rb).sum().to("ral:0")
        loss.backward()
        torch.testing.assert_close(ra.grad.cpu(), 2 * a.detach())
        torch.testing.assert_close(rb.grad.cpu(), 2 * b.detach())
        print("OK", rb.grad.device)
        """,
        env={"RAL_HOST_DEVICE_COUNT": "2", "TORCH_FL_VISIBLE_DEVICES": "0,1"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "OK ral:1" in res.stdout
