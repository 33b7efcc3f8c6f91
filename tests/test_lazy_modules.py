"""Lazy modules moved to a ral device before their first forward materialize there (as on
CUDA), on ral:0 and ral:1, and then compute what the CPU module computes."""

from __future__ import annotations

import copy

import pytest
import torch
from sweep_support import DEVICES, need_device
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter

from torch_fl.core.errors import UnsupportedError

CASES = {
    "LazyLinear": (lambda: torch.nn.LazyLinear(3), (4, 5)),
    "LazyConv2d": (lambda: torch.nn.LazyConv2d(4, 3), (2, 3, 8, 8)),
    "LazyConvTranspose1d": (lambda: torch.nn.LazyConvTranspose1d(4, 3), (2, 3, 8)),
    "LazyBatchNorm1d": (lambda: torch.nn.LazyBatchNorm1d(), (4, 5)),
}


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_lazy_module_materializes_on_device(dev, name):
    need_device(dev)
    make, shape = CASES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    ref = make()
    ref(x)  # materialize on CPU: its weights are the reference's
    m = make().to(dev)
    assert isinstance(m.weight, UninitializedParameter)
    assert m.weight.device == torch.device(dev)
    m(x.to(dev))
    assert not isinstance(m.weight, UninitializedParameter)
    assert isinstance(m.weight, torch.nn.Parameter) and m.weight.requires_grad
    assert m.weight.shape == ref.weight.shape and m.weight.device == torch.device(dev)
    m.load_state_dict(ref.state_dict())
    y, y_ref = m(x.to(dev)), ref(x)
    w = torch.rand(y_ref.shape, generator=torch.Generator().manual_seed(1))
    (y * w.to(dev)).sum().backward()
    (y_ref * w).sum().backward()
    torch.testing.assert_close(y.cpu(), y_ref, rtol=1.3e-5, atol=1e-5)
    for (n, p), p_ref in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), p_ref.grad, rtol=1.3e-5, atol=1e-5, msg=n)
    for b, b_ref in zip(m.buffers(), ref.buffers()):
        torch.testing.assert_close(b.cpu(), b_ref)


@pytest.mark.parametrize("dev", DEVICES)
def test_uninitialized_copies_and_loads_on_device(dev):
    need_device(dev)
    m = torch.nn.LazyBatchNorm1d().to(dev)
    assert isinstance(m.running_mean, UninitializedBuffer)
    clone = copy.deepcopy(m)
    assert isinstance(clone.weight, UninitializedParameter) and clone.weight.device == torch.device(dev)
    ref = torch.nn.BatchNorm1d(5)
    ref.running_mean.fill_(0.5)
    clone.load_state_dict(ref.state_dict())  # a state dict materializes a lazy module too
    assert clone.running_mean.device == torch.device(dev)
    torch.testing.assert_close(clone.running_mean.cpu(), ref.running_mean)
    with pytest.raises(RuntimeError, match="uninitialized parameter"):
        _ = m.weight.shape
    with pytest.raises(UnsupportedError, match="move the module"):
        m.weight.materialize((5,), device="cpu")
    # the CPU classes are unchanged: a CPU lazy buffer still converts like torch's
    assert type(UninitializedBuffer().float()) is UninitializedBuffer


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("how", ["device_kwarg", "inside_mode"])
def test_lazy_module_built_on_device(dev, how):
    """`nn.LazyLinear(3, device=dev)` and a lazy module built inside ral_mode (whose factories
    allocate on the device) start uninitialized on the device and compute like CPU."""
    need_device(dev)
    from torch_fl.mode import ral_mode

    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))
    ref = torch.nn.LazyConv1d(4, 3)
    y_ref = ref(x)
    if how == "device_kwarg":
        m = torch.nn.LazyConv1d(4, 3, device=dev)
        m(x.to(dev))
        m.load_state_dict(ref.state_dict())
        y = m(x.to(dev)).cpu()
    else:
        with ral_mode(dev):
            m = torch.nn.LazyConv1d(4, 3)
            assert isinstance(m.weight, UninitializedParameter)
            m(x)
            m.load_state_dict(ref.state_dict())
            y = m(x).cpu()
    assert m.weight.device == torch.device(dev) and isinstance(m.weight, torch.nn.Parameter)
    torch.testing.assert_close(y, y_ref, rtol=1.3e-5, atol=1e-5)
