"""`Tensor.resize_` on ral tensors as on CPU and CUDA: the same sizes keep the tensor's strides,
new sizes read the same storage bytes row-major from the same offset (or in the asked memory
format), and growing a buffer keeps its bytes in place, so every view of it sees the grown
memory. Each case runs on CPU and on ral:N and compares sizes, strides, offsets and the values
that PyTorch defines (bytes that existed before the resize)."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _same_sizes(device):
    x = torch.arange(6.0).view(2, 3).to(device).t()  # strides (1, 3)
    x.resize_(3, 2)
    return x.stride(), x.storage_offset(), x.cpu()


def _new_sizes_of_a_transposed_view(device):
    x = torch.arange(6.0).view(2, 3).to(device).t()
    x.resize_(6)  # fits: the storage's bytes, row-major
    y = torch.arange(6.0).view(2, 3).to(device).t()
    y.resize_(2, 5)  # grows: the 6 old elements keep their storage order
    return x.stride(), x.cpu(), y.stride(), y.reshape(-1)[:6].cpu()


def _growing_a_view(device):
    base = torch.arange(10.0).to(device)
    view = base[2:5]
    view.resize_(12)  # needs 14 elements of storage: the buffer grows in place
    view[1] = 100.0  # a write through the grown view is a write into base's storage
    view[9] = -1.0  # and so is one past the old end
    return (
        view.storage_offset(),
        view.untyped_storage().nbytes(),
        view[:8].cpu(),
        base.cpu(),
        view[9].cpu(),
    )


def _memory_formats(device):
    four = torch.empty(10, device=device).resize_(2, 3, 4, 4, memory_format=torch.channels_last)
    five = torch.empty(10, device=device).resize_(2, 3, 4, 4, 5, memory_format=torch.channels_last_3d)
    same = torch.empty(2, 3, 4, 4, device=device).resize_(2, 3, 4, 4, memory_format=torch.channels_last)
    back = four.clone(memory_format=torch.channels_last).resize_(2, 3, 4, 4, memory_format=torch.contiguous_format)
    return (
        four.stride(),
        five.stride(),
        same.stride(),
        back.stride(),
        four.is_contiguous(memory_format=torch.channels_last),
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "case", [_same_sizes, _new_sizes_of_a_transposed_view, _growing_a_view, _memory_formats], ids=lambda f: f.__name__
)
def test_resize_matches_cpu(device, case):
    expected, got = case("cpu"), case(device)
    for e, g in zip(expected, got, strict=True):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e, rtol=0, atol=0)
        else:
            assert g == e


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"memory_format": torch.channels_last}, "required rank 4 tensor to use channels_last format"),
        ({"memory_format": torch.preserve_format}, "Unsupported memory format"),
    ],
)
def test_resize_refuses_what_cpu_refuses(device, kwargs, message):
    with pytest.raises(RuntimeError, match=message):
        torch.empty(10).resize_(2, 3, **kwargs)
    t = torch.arange(10.0, device=device)
    with pytest.raises(RuntimeError, match=message):
        t.resize_(2, 3, **kwargs)
    assert t.shape == (10,) and t.cpu().tolist() == list(map(float, range(10)))  # unchanged, still usable


@pytest.mark.parametrize("device", DEVICES)
def test_resize_under_ral_mode_matches_cpu(device):
    def program():
        x = torch.arange(6.0).view(2, 3).t()
        x.resize_(3, 2)
        base = torch.arange(10.0)
        view = base[2:5]
        view.resize_(12)
        view[1] = 100.0
        fmt = torch.empty(10).resize_(2, 3, 4, 4, memory_format=torch.channels_last)
        return x.stride(), (x * 1).tolist(), (view[:8] + 0).tolist(), (base * 1).tolist(), fmt.stride()

    expected = program()
    with torch_fl.ral_mode(device):
        got = program()
    assert got == expected
