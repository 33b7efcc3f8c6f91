"""Regressions found by the reliability sweep (issue 18): each failed before its fix."""

from __future__ import annotations

import pytest
import torch

DEVICES = ["ral:0", "ral:1"]


def _need(dev: str) -> int:
    idx = int(dev.split(":")[1])
    if torch.ral.device_count() <= idx:
        pytest.skip(f"{dev} is not present (needs the host and OpenCL plugins)")
    return idx


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize(
    "size, stride, offset",
    [((4,), (-1,), 8), ((4,), (1,), -1), ((4,), (1,), 20), ((2, 3), (8, 1), 8)],
    ids=["negative-stride", "negative-offset", "past-storage", "past-storage-2d"],
)
def test_as_strided_rejects_like_cpu(dev, size, stride, offset):
    """as_strided raises what CPU raises instead of silently making another view."""
    _need(dev)
    x = torch.arange(16.0)
    with pytest.raises(RuntimeError) as cpu_err:
        x.as_strided(size, stride, offset)
    with pytest.raises(RuntimeError) as ral_err:
        x.to(dev).as_strided(size, stride, offset)
    assert str(ral_err.value).split(":")[0] == str(cpu_err.value).split(":")[0]


@pytest.mark.parametrize("dev", DEVICES)
def test_as_strided_valid_views_match_cpu(dev):
    """Valid views (overlapping, zero-size, at the very end) still work."""
    _need(dev)
    x = torch.arange(16.0)
    for args in [((4,), (1,), 12), ((0,), (1,), 100), ((2, 2), (0, 1), 3), ((3, 3), (1, 1), 0)]:
        assert torch.equal(x.to(dev).as_strided(*args).cpu(), x.as_strided(*args))


@pytest.mark.parametrize("dev", DEVICES)
def test_stream_idle_once_its_last_event_synchronized(dev):
    """Stream.query() is True right after an event recorded at its tail completed."""
    idx = _need(dev)
    x = torch.randn(256, 256)
    for _ in range(30):
        s = torch.ral.Stream(idx)
        with torch.ral.stream(s):
            r = x.to(dev)
            y = r @ r
            ev = s.record_event()
        ev.synchronize()
        assert ev.query()
        assert s.query()
    torch.testing.assert_close(y.cpu(), x @ x, rtol=1e-4, atol=1e-4)
