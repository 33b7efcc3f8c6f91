"""Device memory comes back: the allocation patterns of OpenReg's leak tests (which assert
nothing), and the ways a ral tensor's memory can change hands (storages, resize, deepcopy,
save/load, DLPack, copies to the other device), leave `torch.ral.memory_allocated` where it was
on both devices once the tensors are gone."""

import copy
import gc
import io

import pytest
import torch

# each test collects garbage twice: only its own (conftest.young_gc)
pytestmark = pytest.mark.usefixtures("young_gc")

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _save_load(t):
    buf = io.BytesIO()
    torch.save(t, buf)
    buf.seek(0)
    return torch.load(buf)


def _backward(d):
    x = torch.randn(100, device=d, requires_grad=True)
    (x * 2).sum().backward()
    return x.grad


def _views(d):
    x = torch.randn(1000, device=d)
    return x.view(10, 100), x[100:200], x.reshape(20, 50)


def _other(d):
    return f"ral:{1 - torch.device(d).index}" if len(DEVICES) > 1 else d


PATTERNS = {
    "copies": lambda d: torch.randn(500, device=d).cpu().to(d).clone(),
    "views": _views,
    "graph": lambda d: torch.randn(100, device=d, requires_grad=True) + torch.randn(100, device=d, requires_grad=True),
    "backward": _backward,
    "untyped_storage": lambda d: torch.randn(100, device=d).untyped_storage(),
    "UntypedStorage(n)": lambda d: torch.UntypedStorage(4000, device=d),
    "storage resize_": lambda d: torch.randn(100, device=d).untyped_storage().resize_(8000),
    "tensor resize_ growing": lambda d: torch.randn(100, device=d)[10:].resize_(5000),
    "deepcopy": lambda d: copy.deepcopy(torch.randn(100, device=d)),
    "save/load": lambda d: _save_load(torch.randn(100, device=d)),
    "from_dlpack": lambda d: torch.from_dlpack(torch.randn(100, device=d)) + 1,
    "set_ to a storage": lambda d: torch.empty(0, device=d).set_(torch.randn(100, device=d).untyped_storage()),
    "to the other device": lambda d: torch.randn(100, device=d).to(_other(d)),
}


def _allocated():
    for d in DEVICES:
        torch.ral.synchronize(d)
    gc.collect()
    return [torch.ral.memory_allocated(d) for d in DEVICES]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_memory_comes_back(device, pattern):
    make = PATTERNS[pattern]
    del_me = make(device)  # warm-up: one-time allocations (kernels, caches) happen here
    del del_me
    before = _allocated()
    for _ in range(3):
        del_me = make(device)
        del del_me
    assert _allocated() == before
