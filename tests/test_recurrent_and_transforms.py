"""nn.LSTM / nn.GRU / RNN cells in every style (layers, bidirectional, batch_first, proj_size),
torch.utils.checkpoint (reentrant and not) and torch.func (vmap, grad, jacrev) on ral:0 and
ral:1, in both styles (`.to(dev)` and CPU code under ral_mode), compared with CPU.
Tolerance: float32, rtol 1e-4 / atol 1e-5 (outputs and every gradient)."""

import copy

import pytest
import torch
from torch.func import grad, jacrev, vmap
from torch.utils.checkpoint import checkpoint

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
STYLES = ["to_dev", "mode"]
TOL = {"rtol": 1e-4, "atol": 1e-5}

RNNS = {
    "lstm": lambda: torch.nn.LSTM(4, 6),
    "lstm_2layer_bidir_batchfirst": lambda: torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True),
    "lstm_proj": lambda: torch.nn.LSTM(4, 6, proj_size=3),
    "lstm_nobias": lambda: torch.nn.LSTM(4, 6, bias=False),
    "gru": lambda: torch.nn.GRU(4, 6),
    "gru_2layer_bidir": lambda: torch.nn.GRU(4, 6, num_layers=2, bidirectional=True),
    "gru_nobias_batchfirst": lambda: torch.nn.GRU(4, 6, bias=False, batch_first=True),
    "rnn_tanh": lambda: torch.nn.RNN(4, 6, nonlinearity="tanh"),
    "lstm_cell": lambda: torch.nn.LSTMCell(4, 6),
    "gru_cell": lambda: torch.nn.GRUCell(4, 6),
}


def _forward(m, x):
    out = m(x)
    if isinstance(out, tuple):  # (output, h) or (output, (h, c)) or the cells' (h, c)
        flat = [out[0]] + (list(out[1]) if isinstance(out[1], tuple) else [out[1]])
        return sum((t * (i + 1)).sum() for i, t in enumerate(flat)), out[0]
    return out.sum(), out


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", sorted(RNNS))
def test_recurrent_modules_match_cpu(dev, style, name):
    torch.manual_seed(0)
    ref = RNNS[name]()
    m = copy.deepcopy(ref)
    x = torch.randn(2, 5, 4) if "cell" not in name else torch.randn(3, 4)
    loss_ref, out_ref = _forward(ref, x)
    loss_ref.backward()
    if style == "to_dev":
        m.to(dev)
        loss, out = _forward(m, x.to(dev))
        loss.backward()
        grads = [p.grad.cpu() for p in m.parameters()]
    else:
        with torch_fl.ral_mode(dev):
            loss, out = _forward(m, x)
            loss.backward()
        grads = [p.grad for p in m.parameters()]
    assert out.device.type == "ral"
    torch.testing.assert_close(out.detach().cpu(), out_ref.detach(), **TOL)
    for g, p in zip(grads, ref.parameters()):
        torch.testing.assert_close(g, p.grad, **TOL)


def _block():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_matches_cpu(dev, style, reentrant):
    ref, m = _block(), _block()
    x = torch.randn(3, 4)
    xr = x.clone().requires_grad_()
    checkpoint(ref, xr, use_reentrant=reentrant).pow(2).sum().backward()
    if style == "to_dev":
        m.to(dev)
        xd = x.to(dev).requires_grad_()
        checkpoint(m, xd, use_reentrant=reentrant).pow(2).sum().backward()
        x_grad, grads = xd.grad.cpu(), [p.grad.cpu() for p in m.parameters()]
    else:
        xd = x.clone().requires_grad_()
        with torch_fl.ral_mode(dev):
            checkpoint(m, xd, use_reentrant=reentrant).pow(2).sum().backward()
        x_grad, grads = xd.grad, [p.grad for p in m.parameters()]
    torch.testing.assert_close(x_grad, xr.grad, **TOL)
    for g, p in zip(grads, ref.parameters()):
        torch.testing.assert_close(g, p.grad, **TOL)


def _f(x):
    return (x.sin() * x).sum()


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", STYLES)
def test_torch_func_matches_cpu(dev, style):
    x = torch.randn(5)
    batch = torch.randn(3, 5)
    w = torch.randn(5, 2)
    expected = (vmap(lambda r: r @ w)(batch), grad(_f)(x), jacrev(torch.sin)(x), vmap(grad(_f))(batch))
    if style == "to_dev":
        wd = w.to(dev)
        got = (
            vmap(lambda r: r @ wd)(batch.to(dev)),
            grad(_f)(x.to(dev)),
            jacrev(torch.sin)(x.to(dev)),
            vmap(grad(_f))(batch.to(dev)),
        )
    else:
        with torch_fl.ral_mode(dev):
            got = (vmap(lambda r: r @ w)(batch), grad(_f)(x), jacrev(torch.sin)(x), vmap(grad(_f))(batch))
    # vmap computes on the device; under the mode a gradient with respect to a CPU tensor
    # comes home to CPU, as every CPU leaf's gradient does in ral_mode
    devices = ["ral"] * 4 if style == "to_dev" else ["ral", "cpu", "cpu", "cpu"]
    for a, e, where in zip(got, expected, devices):
        assert a.device.type == where
        torch.testing.assert_close(a.cpu(), e, **TOL)
