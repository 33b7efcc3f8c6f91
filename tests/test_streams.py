"""Capability: streams, events and asynchronous execution."""

import torch
from conftest import assert_close


def test_stream_ordering_and_events(dev):
    s = torch.ral.Stream(dev)
    x = torch.randn(256, 256)
    with torch.ral.stream(s):
        assert torch.ral.current_stream(dev) == s
        r = x.to(dev)
        y = r @ r
        ev = s.record_event()
    ev.synchronize()
    assert ev.query()
    assert s.query()
    assert_close(y, x @ x, rtol=1e-4, atol=1e-4)
    assert torch.ral.current_stream(dev) == torch.ral.default_stream(dev)


def test_event_timing(dev):
    start, end = torch.ral.Event(enable_timing=True), torch.ral.Event(enable_timing=True)
    a = torch.randn(512, 512).to(dev)
    start.record()
    for _ in range(3):
        a = a @ a / 512
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0


def test_wait_stream(dev):
    s1, s2 = torch.ral.Stream(dev), torch.ral.Stream(dev)
    with torch.ral.stream(s1):
        a = torch.ones(1000, device=dev) * 3
    s2.wait_stream(s1)
    with torch.ral.stream(s2):
        b = a + 1
    s2.synchronize()
    assert b.sum().item() == 4000


def test_async_work_completes_before_readback(dev):
    x = torch.randn(1024, 1024)
    r = x.to(dev)
    for _ in range(5):
        r = r * 1.0001 + 0.5
    expected = x
    for _ in range(5):
        expected = expected * 1.0001 + 0.5
    assert_close(r, expected, rtol=1e-5, atol=1e-5)
