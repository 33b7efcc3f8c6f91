"""Host-to-device copies (`dst.copy_(cpu)`, `torch.tensor(data, device=...)`, a list index)
give CPU's values whatever the two layouts: a CPU tensor holding dst's bytes as they lie
goes to dst in one stream copy (transfer.py `copy_into`); any other pairing (another dtype,
shape, strides, a broadcast, a lazy conjugate or negation) is staged and converted on the
device. Each case is compared with the same copy between CPU tensors, exactly, on both
devices, with `.to` and under ral_mode."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _cases():
    """(name, make dst on a device, src on CPU) pairs."""
    torch.manual_seed(0)
    f = torch.randn(4, 6)
    c = torch.randn(4, 6, dtype=torch.complex64)
    return [
        ("same layout", lambda d: torch.zeros(4, 6, device=d), f),
        ("dst a view at an offset", lambda d: torch.zeros(10, 6, device=d)[3:7], f),
        ("dst strided", lambda d: torch.zeros(4, 12, device=d)[:, ::2], f),
        ("src strided", lambda d: torch.zeros(4, 6, device=d), torch.randn(6, 4).t()),
        ("both transposed", lambda d: torch.zeros(6, 4, device=d).t(), torch.randn(6, 4).t()),
        ("src broadcast", lambda d: torch.zeros(4, 6, device=d), torch.randn(6)),
        ("src another dtype", lambda d: torch.zeros(4, 6, device=d), torch.randn(4, 6, dtype=torch.float64)),
        ("int64", lambda d: torch.zeros(4, 6, dtype=torch.int64, device=d), torch.arange(24).view(4, 6)),
        ("bool", lambda d: torch.zeros(4, 6, dtype=torch.bool, device=d), f > 0),
        ("bfloat16", lambda d: torch.zeros(4, 6, dtype=torch.bfloat16, device=d), f.bfloat16()),
        ("lazy conjugate", lambda d: torch.zeros(4, 6, dtype=torch.complex64, device=d), c.conj()),
        ("lazy negation", lambda d: torch.zeros(4, 6, dtype=torch.complex64, device=d), torch._neg_view(c)),
        ("size-1 dims", lambda d: torch.zeros(1, 6, 1, device=d), torch.randn(1, 6, 1)),
        ("empty", lambda d: torch.zeros(0, 6, device=d), torch.randn(0, 6)),
    ]


def _expected(make, src):
    dst = make("cpu")
    return dst.copy_(src)


@pytest.mark.parametrize("device", DEVICES)
def test_copy_from_host_matches_cpu(device):
    for name, make, src in _cases():
        got = make(device).copy_(src)
        want = _expected(make, src)
        assert got.device.type == "ral" and got.dtype == want.dtype, name
        assert torch.equal(got.cpu(), want), name


@pytest.mark.parametrize("device", DEVICES)
def test_copy_from_host_keeps_the_rest_of_the_buffer(device):
    # a copy into a view writes that view's elements only
    base = torch.arange(60, dtype=torch.float32).view(10, 6)
    d = base.to(device)
    d[3:7].copy_(torch.full((4, 6), -1.0))
    d[:, 4:].copy_(torch.full((10, 2), -2.0))
    base[3:7] = -1.0
    base[:, 4:] = -2.0
    assert torch.equal(d.cpu(), base)


@pytest.mark.parametrize("device", DEVICES)
def test_factories_from_data_and_list_indices(device):
    data = [[1.5, -2.0, 3.25], [0.0, 7.0, -1.0]]
    ids = torch.arange(40).view(1, 40)
    want = [torch.tensor(data), torch.tensor(data, dtype=torch.float16), ids[:, [-1, 0]], torch.tensor([True, False])]

    def run(dev, on):
        return [
            torch.tensor(data, **on),
            torch.tensor(data, dtype=torch.float16, **on),
            ids.to(dev)[:, [-1, 0]],
            torch.tensor([True, False], **on),
        ]

    for got in (run(device, {"device": device}),):
        for g, w in zip(got, want, strict=True):
            assert g.device.type == "ral" and g.dtype == w.dtype and torch.equal(g.cpu(), w)
    with torch_fl.ral_mode(device):
        got = run(device, {})
        assert all(g.device.type == "ral" for g in got)
        got = [g.cpu() for g in got]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w)


@pytest.mark.parametrize("device", DEVICES)
def test_copy_from_host_under_ral_mode(device):
    # a CPU tensor written into a device tensor made inside the mode
    for name, make, src in _cases():
        want = _expected(make, src)
        with torch_fl.ral_mode(device):
            dst = make(device)
            dst.copy_(src)
        assert torch.equal(dst.cpu(), want), name
