"""The cpu tier on a host-mappable device (ral:0) writes each result straight into its fresh
device buffer with one CPU copy (tiers/cpu.py `_fill_on_host`), never through an upload
(`to_device`: a row-major CPU copy of a channels_last result first, then a stream copy).
Values and layouts must be CPU's; the upload path must not run."""

from __future__ import annotations

import pytest
import torch
from conftest import host_device_present

import torch_fl
from torch_fl.tiers import cpu as cpu_tier

pytestmark = pytest.mark.skipif(not host_device_present(), reason="host plugin not built")


def _no_upload(*args, **kwargs):
    raise AssertionError("the cpu tier uploaded a result through to_device on a host-mappable device")


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_results_are_written_in_place_with_cpu_layout(monkeypatch, layout):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8).to(memory_format=layout)
    xd = x.to("ral:0")
    monkeypatch.setattr(cpu_tier, "to_device", _no_upload)
    with torch_fl.coverage() as cov:
        got, idx = torch.nn.functional.max_pool2d_with_indices(xd, 2)  # a cpu-tier op on ral:0
    assert ("aten::max_pool2d_with_indices", "cpu") in cov.counts, cov.counts
    want, want_idx = torch.nn.functional.max_pool2d_with_indices(x, 2)
    assert got.stride() == want.stride()  # CPU keeps channels_last; so does the upload
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    torch.testing.assert_close(idx.cpu(), want_idx, rtol=0, atol=0)


def test_empty_result(monkeypatch):
    monkeypatch.setattr(cpu_tier, "to_device", _no_upload)
    x = torch.randn(0, 3, 8, 8)
    got = torch.nn.functional.max_pool2d(x.to("ral:0"), 2)
    assert got.shape == (0, 3, 4, 4) and got.device.type == "ral"
