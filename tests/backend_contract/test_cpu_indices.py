"""Advanced indexing of a ral tensor with index tensors on the CPU, as ATen allows for a
tensor on any device ("indices should be either on cpu or on the same device as the indexed
tensor"): `x[cpu_mask] = 0`, `x[cpu_long]`, `index_put_`. PyTorch's view-op suite builds its
inputs this way; ral raised a device-mismatch error. Values against CPU, exactly (indexing
copies elements: rtol=0, atol=0); both devices, both styles."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _program(x, mask, rows, cols):
    x = x.clone()
    x[mask] = 0  # index_put_ with a bool mask, Python scalar value
    picked = x[mask.logical_not()]  # index with a bool mask (data-dependent shape)
    gathered = x[rows]  # index with a long tensor
    pairs = x[rows, cols]  # two index tensors, broadcast together
    x[rows, cols] = torch.tensor(-1.0)  # a 0-dim CPU value
    x.index_put_((cols,), torch.arange(x.shape[1], dtype=x.dtype, device=x.device), accumulate=True)
    return x, picked, gathered, pairs


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 5, generator=g)
    mask = torch.randn(5, 5, generator=g) > 0.3
    rows = torch.tensor([[0, 4], [2, 2]])
    cols = torch.tensor([[1, 3], [0, 4]])
    return x, mask, rows, cols


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_index_tensors_index_a_ral_tensor_as_on_cpu(device):
    x, mask, rows, cols = _inputs()
    expected = _program(x, mask, rows, cols)
    got = _program(x.to(device), mask, rows, cols)
    for g, e in zip(got, expected, strict=True):
        assert g.device == torch.device(device)
        torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_and_device_index_tensors_mix(device):
    x, mask, rows, cols = _inputs()
    expected = x[rows, cols]
    got = x.to(device)[rows.to(device), cols]
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_indices_under_ral_mode_match_cpu(device):
    x, mask, rows, cols = _inputs()
    expected = _program(x, mask, rows, cols)
    with torch_fl.ral_mode(device):
        got = _program(x, mask, rows, cols)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_index_tensors_of_another_device_still_refused(device):
    # CUDA refuses indices on another accelerator; only CPU indices are moved.
    if torch.ral.device_count() < 2:
        pytest.skip("needs two ral devices")
    other = "ral:1" if device == "ral:0" else "ral:0"
    x = torch.randn(4, 4, device=device)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x[torch.tensor([0, 1], device=other)]
    torch.testing.assert_close(x[torch.tensor([1])].cpu(), x.cpu()[1:2], rtol=0, atol=0)  # still usable
