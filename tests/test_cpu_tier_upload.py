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


def _aa(t: torch.Tensor, scale: float) -> torch.Tensor:
    """Antialiased bilinear resampling (`_upsample_bilinear2d_aa`): a cpu-tier op on both
    devices (no vendor kernel), and CPU keeps a channels_last input's layout."""
    return torch.nn.functional.interpolate(t, scale_factor=scale, mode="bilinear", antialias=True)


def _aa_backward(g: torch.Tensor, x_shape) -> torch.Tensor:
    return torch.ops.aten._upsample_bilinear2d_aa_backward(g, list(g.shape[2:]), list(x_shape), False, None, None)


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_results_are_written_in_place_with_cpu_layout(monkeypatch, layout):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 12, 10).to(memory_format=layout)
    xd = x.to("ral:0")
    monkeypatch.setattr(cpu_tier, "to_device", _no_upload)
    with torch_fl.coverage() as cov:  # antialiased downsampling: a cpu-tier op on ral:0
        got = _aa(xd, 0.6)
        back = _aa_backward(got, x.shape)
    assert ("aten::_upsample_bilinear2d_aa", "cpu") in cov.counts, cov.counts
    assert ("aten::_upsample_bilinear2d_aa_backward", "cpu") in cov.counts, cov.counts
    want = _aa(x, 0.6)
    want_back = _aa_backward(want, x.shape)
    assert got.stride() == want.stride()  # CPU keeps channels_last; so does the result here
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    torch.testing.assert_close(back.cpu(), want_back, rtol=0, atol=0)


def test_empty_result(monkeypatch):
    monkeypatch.setattr(cpu_tier, "to_device", _no_upload)
    x = torch.randn(0, 3, 8, 8)
    got = _aa(x.to("ral:0"), 2)
    assert got.shape == (0, 3, 16, 16) and got.device.type == "ral"


def _no_fill(*args, **kwargs):
    raise AssertionError("a large result was copied into device memory rather than written there")


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_large_results_are_written_by_the_out_overload(monkeypatch, layout):
    """cumsum of 64K floats and an antialiased bilinear upsample (512K floats): no copy of the
    result (neither upload nor _fill_on_host), CPU's values and layout."""
    torch.manual_seed(0)
    x, img = torch.randn(1 << 16), torch.randn(2, 4, 64, 64).to(memory_format=layout)
    monkeypatch.setattr(cpu_tier, "to_device", _no_upload)
    monkeypatch.setattr(cpu_tier, "_fill_on_host", _no_fill)
    with torch_fl.coverage() as cov:
        got = torch.cumsum(x.to("ral:0"), 0)
        up = _aa(img.to("ral:0"), 4)
    assert ("aten::cumsum", "cpu") in cov.counts and ("aten::_upsample_bilinear2d_aa", "cpu") in cov.counts, cov.counts
    torch.testing.assert_close(got.cpu(), torch.cumsum(x, 0), rtol=0, atol=0)
    want = _aa(img, 4)
    assert up.stride() == want.stride()
    torch.testing.assert_close(up.cpu(), want, rtol=0, atol=0)
