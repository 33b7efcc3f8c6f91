"""Contract: one current ral device per thread, read and written alike by PyTorch's device
guard (torch.accelerator, the autograd engine) and by torch.ral; a bare "ral" means it."""

import threading

import pytest
import torch

DEVICES = list(range(min(2, torch.ral.device_count())))


@pytest.fixture(autouse=True)
def _restore_device():
    prev = torch.ral.current_device()
    yield
    torch.ral.set_device(prev)


@pytest.mark.parametrize("idx", DEVICES)
@pytest.mark.parametrize("setter", ["accelerator", "ral", "context"])
def test_bare_ral_means_current_device(idx, setter):
    """Every way of choosing the device moves factories, .to, streams and events."""

    def check():
        assert torch.ral.current_device() == idx
        assert torch.accelerator.current_device_index() == idx
        assert torch.randn(2, device="ral").device == torch.device("ral", idx)
        assert torch.zeros(2).to("ral").device == torch.device("ral", idx)
        assert torch.Stream(device="ral").device_index == idx
        assert torch.accelerator.current_stream().device_index == idx
        ev = torch.Event(device="ral")
        ev.record()
        ev.synchronize()
        assert ev.device == torch.device("ral", idx)
        assert torch.ral.memory_allocated("ral") == torch.ral.memory_allocated(idx)

    other = 1 - idx if len(DEVICES) > 1 else idx
    torch.ral.set_device(other)
    if setter == "accelerator":
        torch.accelerator.set_device_index(idx)
        check()
    elif setter == "ral":
        torch.ral.set_device(idx)
        check()
    else:
        with torch.ral.device(idx):
            check()
        assert torch.ral.current_device() == other


def test_out_of_range_index_raises_at_set_time():
    n = torch.ral.device_count()
    torch.ral.set_device(0)
    for setter in (torch.accelerator.set_device_index, torch.ral.set_device, torch.ral.device):
        with pytest.raises(RuntimeError, match=f"ral:{n} does not exist"):
            setter(n)
        assert torch.ral.current_device() == 0  # unchanged, and the process keeps working
    with pytest.raises(RuntimeError, match="does not exist"):
        torch.ral.set_device(-5)
    assert torch.randn(2, device="ral").device == torch.device("ral", 0)


@pytest.mark.parametrize("idx", DEVICES)
def test_error_inside_device_context_restores(idx):
    torch.ral.set_device(0)
    with pytest.raises(KeyError), torch.ral.device(idx):
        assert torch.accelerator.current_device_index() == idx
        raise KeyError("boom")
    assert torch.ral.current_device() == 0
    assert torch.accelerator.current_device_index() == 0


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs two ral devices")
def test_threads_keep_their_own_device():
    torch.ral.set_device(1)
    seen = {}

    def worker():
        seen["start"] = torch.ral.current_device()
        torch.accelerator.set_device_index(0)
        seen["tensor"] = torch.ones(1, device="ral").device

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == {"start": 0, "tensor": torch.device("ral", 0)}  # a new thread starts on 0
    assert torch.ral.current_device() == 1  # the worker's choice did not leak here


@pytest.mark.parametrize("idx", DEVICES)
def test_autograd_thread_sees_its_device_and_stream(idx):
    """The engine's worker thread for ral:N sets N through the guard; Python code running
    there (hooks, torch_fl's ops) must see N and the forward op's stream."""
    torch.ral.set_device(0)
    s = torch.Stream(device=f"ral:{idx}")
    w = torch.randn(8, device=f"ral:{idx}", requires_grad=True)
    seen = []

    def hook(g):
        seen.append((torch.ral.current_device(), torch.ral.current_stream(idx).stream_id))
        return g

    with torch.ral.stream(s):
        y = (w * 3).sum()
    w.register_hook(hook)
    y.backward()
    assert seen == [(idx, s.stream_id)]
    torch.testing.assert_close(w.grad.cpu(), torch.full((8,), 3.0))
