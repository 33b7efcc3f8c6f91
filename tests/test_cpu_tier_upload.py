"""The cpu tier on a host-mappable device (ral:0) writes each result straight into its fresh
device buffer with one CPU copy (tiers/cpu.py `_fill_on_host`), never through an upload
(`to_device`: a row-major CPU copy of a channels_last result first, then a stream copy).
A large single result of an op with an out= overload is written by that overload into the
device buffer itself, with no copy at all (`_into_device`). Values and layouts must be CPU's;
the upload path must not run."""

from __future__ import annotations

import pytest
import torch
from conftest import host_device_present

import torch_fl
from torch_fl.tiers import cpu as cpu_tier

pytestmark = pytest.mark.skipif(not host_device_present(), reason="host plugin not built")


def _no_upload(*args, **kwargs):
    raise AssertionError("the cpu tier uploaded a result through to_device on a host-mappable device")


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last_3d])
def test_results_are_written_in_place_with_cpu_layout(monkeypatch, layout):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 6, 6).to(memory_format=layout)
    xd = x.to("ral:0")
    monkeypatch.setattr(cpu_tier, "to_device", _no_upload)
    with torch_fl.coverage() as cov:  # 3-d nearest upsampling: a cpu-tier op on ral:0
        got = torch.nn.functional.interpolate(xd, scale_factor=1.5, mode="nearest")
        back = torch.ops.aten.upsample_nearest3d_backward(got, list(got.shape[2:]), list(x.shape), None, None, None)
    assert ("aten::upsample_nearest3d", "cpu") in cov.counts, cov.counts
    want = torch.nn.functional.interpolate(x, scale_factor=1.5, mode="nearest")
    want_back = torch.ops.aten.upsample_nearest3d_backward(want, list(want.shape[2:]), list(x.shape), None, None, None)
    assert got.stride() == want.stride()  # CPU keeps channels_last_3d; so does the result here
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    torch.testing.assert_close(back.cpu(), want_back, rtol=0, atol=0)


def test_empty_result(monkeypatch):
    monkeypatch.setattr(cpu_tier, "to_device", _no_upload)
    x = torch.randn(0, 3, 2, 8, 8)
    got = torch.nn.functional.interpolate(x.to("ral:0"), scale_factor=2, mode="nearest")
    assert got.shape == (0, 3, 4, 16, 16) and got.device.type == "ral"


def _no_fill(*args, **kwargs):
    raise AssertionError("a large result was copied into device memory rather than written there")


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last_3d])
def test_large_results_are_written_by_the_out_overload(monkeypatch, layout):
    """cumsum of 64K floats and a trilinear upsample: no copy of the result (neither upload nor
    _fill_on_host), CPU's values and layout."""
    torch.manual_seed(0)
    x, img = torch.randn(1 << 16), torch.randn(2, 4, 4, 16, 16).to(memory_format=layout)
    monkeypatch.setattr(cpu_tier, "to_device", _no_upload)
    monkeypatch.setattr(cpu_tier, "_fill_on_host", _no_fill)
    with torch_fl.coverage() as cov:
        got = torch.cumsum(x.to("ral:0"), 0)
        up = torch.nn.functional.interpolate(img.to("ral:0"), scale_factor=4, mode="trilinear")
    assert ("aten::cumsum", "cpu") in cov.counts and ("aten::upsample_trilinear3d", "cpu") in cov.counts, cov.counts
    torch.testing.assert_close(got.cpu(), torch.cumsum(x, 0), rtol=0, atol=0)
    want = torch.nn.functional.interpolate(img, scale_factor=4, mode="trilinear")
    assert up.stride() == want.stride()
    torch.testing.assert_close(up.cpu(), want, rtol=0, atol=0)
