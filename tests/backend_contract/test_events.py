"""Contract: events and streams through PyTorch's generic torch.Event/torch.Stream (the device
guard) and torch.ral's own classes: timing, synchronize, query, wait_event, wait_stream, with
and without an explicit index, and the errors CUDA gives for mismatched devices."""

import pytest
import torch

DEVICES = list(range(min(2, torch.ral.device_count())))


def _work(dev, n=256):
    x = torch.randn(n, n)
    r = x.to(dev)
    return r @ r, x @ x


@pytest.mark.parametrize("idx", DEVICES)
@pytest.mark.parametrize("explicit", [True, False])
def test_generic_event_timing_and_sync(idx, explicit):
    with torch.ral.device(idx):
        where = f"ral:{idx}" if explicit else "ral"
        s = torch.Stream(device=where)
        start = torch.Event(device=where, enable_timing=True)
        end = torch.Event(device=where, enable_timing=True)
        assert start.query()  # never recorded: done
        with s:
            start.record(s)
            y, ref = _work(f"ral:{idx}")
            end.record(s)
        end.synchronize()
        assert end.query() and s.query()
        ms = start.elapsed_time(end)
        assert 0.0 <= ms < 60_000.0
        torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-4)
        plain = torch.Event(device=where)
        plain.record()
        plain.synchronize()
        with pytest.raises(ValueError, match="enable_timing=True"):
            plain.elapsed_time(end)


@pytest.mark.parametrize("idx", DEVICES)
def test_generic_wait_event_and_wait_stream(idx):
    dev = f"ral:{idx}"
    s1, s2 = torch.Stream(device=dev), torch.Stream(device=dev)
    with s1:
        a = torch.ones(1000, device=dev) * 3
    ev = s1.record_event()
    s2.wait_event(ev)
    with s2:
        b = a + 1
    s2.synchronize()
    torch.testing.assert_close(b.cpu(), torch.full((1000,), 4.0))
    with s1:
        c = b * 2
    s2.wait_stream(s1)
    with s2:
        d = c - 1
    torch.accelerator.synchronize(idx)
    torch.testing.assert_close(d.cpu(), torch.full((1000,), 7.0))


@pytest.mark.parametrize("idx", DEVICES)
def test_ral_event_timing(idx):
    dev = f"ral:{idx}"
    start, end = torch.ral.Event(enable_timing=True), torch.ral.Event(enable_timing=True)
    s = torch.ral.Stream(dev)
    start.record(s)
    with torch.ral.stream(s):
        y, ref = _work(dev)
    end.record(s)
    end.synchronize()
    assert 0.0 <= start.elapsed_time(end) < 60_000.0
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="recorded"):
        start.elapsed_time(torch.ral.Event(enable_timing=True))
    with pytest.raises(ValueError, match="enable_timing=True"):
        start.elapsed_time(torch.ral.Event())


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs two ral devices")
@pytest.mark.parametrize("kind", ["generic", "ral"])
def test_event_across_devices(kind):
    """Recording on another device's stream raises (CUDA's wording); waiting on another device's
    event orders correctly (as CUDA allows); timing across devices raises."""
    if kind == "generic":
        s0, s1 = torch.Stream(device="ral:0"), torch.Stream(device="ral:1")
        e0 = torch.Event(device="ral:0", enable_timing=True)
        e1 = torch.Event(device="ral:1", enable_timing=True)
    else:
        s0, s1 = torch.ral.Stream("ral:0"), torch.ral.Stream("ral:1")
        e0, e1 = torch.ral.Event(enable_timing=True), torch.ral.Event(enable_timing=True)
    e0.record(s0)
    with pytest.raises(RuntimeError, match="Event device index 0 does not match recording stream's device index 1"):
        e0.record(s1)
    with torch.ral.stream(s0) if kind == "ral" else s0:
        a = torch.ones(4096, device="ral:0") * 2
    e0.record(s0)
    e0.wait(s1) if kind == "ral" else s1.wait_event(e0)
    with torch.ral.stream(s1) if kind == "ral" else s1:
        b = a.to("ral:1") + 1
    e1.record(s1)
    e1.synchronize()
    torch.testing.assert_close(b.cpu(), torch.full((4096,), 3.0))
    with pytest.raises(RuntimeError, match="one device"):
        e0.elapsed_time(e1)
    assert (torch.ones(2, device="ral:1") + 1).sum().item() == 4.0  # still working
