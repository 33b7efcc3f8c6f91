"""A ral tensor on a torch.multiprocessing queue arrives in a spawned process as a ral tensor
on the same device with the same values, views (offset, strides) and Parameter-ness
included; it travels as a copy through shared memory (tensor/ipc.py)."""

import pytest
import torch
import torch.multiprocessing as mp

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _echo(q, out, messages=1):
    """Child: describe what arrived (device, class, values, geometry, parameter-ness)."""
    for _ in range(messages):
        items = q.get()
        out.put(
            [
                (
                    str(t.device),
                    type(t).__name__,
                    t.detach().cpu().tolist(),
                    t.stride(),
                    t.storage_offset(),
                    isinstance(t, torch.nn.Parameter),
                    t.requires_grad,
                )
                for t in items
            ]
        )


def _check(items, got, device):
    for t, (dev, cls, values, stride, offset, is_param, requires_grad) in zip(items, got):
        assert dev == device and cls == "RalTensor", "a ral tensor must not arrive as CPU"
        assert values == t.detach().cpu().tolist()
        assert stride == t.stride() and offset == t.storage_offset()
        assert is_param == isinstance(t, torch.nn.Parameter) and requires_grad == t.requires_grad


@pytest.mark.parametrize("device", DEVICES)
def test_queue_delivers_ral_tensors(device):
    import torch_fl

    ctx = mp.get_context("spawn")
    q, out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_echo, args=(q, out, 2))
    p.start()
    base = torch.arange(12.0, device=device).view(3, 4)
    items = [
        base,
        base[1:, ::2],
        base.t(),
        torch.nn.Parameter(torch.ones(2, device=device)),
        torch.arange(5, device=device),
    ]
    q.put(items)
    _check(items, out.get(timeout=240), device)
    with torch_fl.ral_mode(device):  # the mode style: its tensors are ral tensors too
        made = torch.arange(6.0).view(2, 3)
        sent = [made[:, 1:], torch.nn.Parameter(torch.full((2,), 0.5)), base[::2]]
        q.put(sent)
    _check(sent, out.get(timeout=240), device)
    p.join(timeout=60)
    assert p.exitcode == 0


@pytest.mark.parametrize("device", DEVICES)
def test_non_leaf_requiring_grad_is_refused_as_on_cpu(device):
    from multiprocessing.reduction import ForkingPickler

    x = torch.ones(2, device=device, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="Cowardly refusing"):
        ForkingPickler.dumps(x)
    with pytest.raises(RuntimeError, match="Cowardly refusing"):
        ForkingPickler.dumps(torch.ones(2, requires_grad=True) * 2)
