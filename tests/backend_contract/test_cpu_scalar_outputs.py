"""A 0-dim CPU tensor mixes with ral tensors as a scalar operand, as on CUDA, but an op on ral
tensors refuses one as the tensor it writes: `out=` or the `self` of an in-place op. PyTorch's
test_nonzero expects `torch.nonzero(ral, out=cpu_0dim)` to raise "on the same device"; ral
wrote the result into the CPU tensor. Both devices; under `ral_mode` the same program writes
CPU tensors as CPU does (the mode moves them), checked against CPU's values."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
SAME_DEVICE = "Expected all tensors to be on the same device"


def _writes(x, out):
    """Ops that write a 0-dim CPU tensor while reading ral tensors."""
    return [
        lambda: torch.nonzero(x > 0.5, out=out.long()),
        lambda: torch.sum(x, 0, out=out),
        lambda: torch.mul(x.sum(), 2, out=out),
        lambda: out.add_(x.sum()),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_0dim_outputs_refused_as_on_cuda(device):
    x = torch.rand(5, generator=torch.Generator().manual_seed(0)).to(device)
    out = torch.tensor(7.0)
    for write in _writes(x, out):
        with pytest.raises(RuntimeError, match=SAME_DEVICE):
            write()
        assert out.item() == 7.0  # untouched
    # still a scalar operand, and still copied into: CPU's values
    torch.testing.assert_close((x * out).cpu(), x.cpu() * 7.0, rtol=0, atol=0)
    torch.testing.assert_close(out.copy_(x.sum()), x.cpu().sum(), rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_0dim_outputs_under_ral_mode_match_cpu(device):
    x = torch.rand(5, generator=torch.Generator().manual_seed(0))

    def program():
        total = torch.empty(())
        torch.sum(x, 0, out=total)
        acc = torch.tensor(1.0)
        acc.add_(x.sum())
        return total.item(), acc.item()

    expected = program()
    with torch_fl.ral_mode(device):
        got = program()
    assert got == pytest.approx(expected, rel=1.3e-6, abs=1e-5)
