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


@pytest.fixture
def flip_on_cpu():
    """flip and roll forced to the cpu tier (their vendor kernels otherwise serve them)."""
    for op in ("aten::flip", "aten::roll"):
        torch_fl.set_op_override(op, "cpu")
    yield
    for op in ("aten::flip", "aten::roll"):
        torch_fl.set_op_override(op, None)


_SMALL_DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int8,
    torch.bool,
    torch.complex64,
]


@pytest.mark.parametrize("dtype", _SMALL_DTYPES, ids=str)
def test_small_results_are_copied_byte_for_byte(flip_on_cpu, dtype):
    """Small results of cpu-tier ops land in their fresh device buffer as CPU laid them out
    (`_fill_on_host` copies the bytes straight into the mapping when the layouts agree, and
    through a host view when they do not): values, dtypes and strides exactly CPU's."""
    torch.manual_seed(0)
    x = (torch.randn(2, 3, 4, 5) * 4).to(dtype)
    progs = [
        lambda t: torch.flip(t, [1]),
        lambda t: torch.flip(t.contiguous(memory_format=torch.channels_last), [2]),
        lambda t: torch.roll(t[:, :1], 1, 3),  # size-1 dims: their strides are free
        lambda t: torch.flip(t[0, 0, 0, :1], [0]),  # one element
        lambda t: torch.flip(t.conj() if t.is_complex() else t, [0]),  # a lazy conjugate input
    ]
    for src in (x, x.contiguous(memory_format=torch.channels_last)):
        d = src.to("ral:0")
        with torch_fl.coverage() as cov:
            got = [p(d) for p in progs]
        assert cov.counts[("aten::flip", "cpu")] >= 4 and cov.counts[("aten::roll", "cpu")] == 1, cov.counts
        for g, p in zip(got, progs, strict=True):
            want = p(src)
            assert g.dtype == want.dtype and g.stride() == want.stride()
            assert torch.equal(g.cpu(), want)


def test_host_views_follow_a_resized_storage(flip_on_cpu):
    """A zero-copy host view is cached per device buffer; `untyped_storage().resize_()` moves
    the buffer to another block, and the next cpu-tier op must read the new one."""
    d = torch.arange(6, dtype=torch.float32).to("ral:0")
    assert torch.equal(torch.flip(d, [0]).cpu(), torch.arange(6.0).flip(0))
    keep = torch.zeros(4096, device="ral:0")  # holds the old block's neighbours: the new one lies elsewhere
    d.untyped_storage().resize_(1 << 16)
    d.copy_(torch.arange(10.0, 16.0))
    del keep
    assert torch.equal(torch.flip(d, [0]).cpu(), torch.arange(10.0, 16.0).flip(0))


def test_row_major_results_of_channels_last_inputs():
    """A convolution's result is row-major on ral (tiers/cpu.py ROW_MAJOR_RESULTS) where CPU
    keeps channels_last: the small result is converted on its way in, not copied as it lies."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6).contiguous(memory_format=torch.channels_last)
    w = torch.randn(4, 3, 3, 3)
    torch_fl.set_op_override("aten::convolution", "cpu")
    try:
        with torch_fl.coverage() as cov:
            got = torch.nn.functional.conv2d(x.to("ral:0"), w.to("ral:0"))
    finally:
        torch_fl.set_op_override("aten::convolution", None)
    assert cov.counts[("aten::convolution", "cpu")] == 1, cov.counts
    want = torch.nn.functional.conv2d(x, w)
    assert got.is_contiguous() and not want.is_contiguous()
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


_OTHER_OUT_FORMS = {
    # the overload forced to the cpu tier, a call of it; each packet's plain `.out` takes
    # another signature (or none matched by name)
    "aten::clamp_max.Tensor": lambda x, y: torch.clamp_max(x, y),  # Tensor_out, not .out (Scalar)
    "aten::clamp_min.Tensor": lambda x, y: torch.clamp_min(x.T, y.T),
    "aten::clamp.Tensor": lambda x, y: torch.clamp(x, y, y + 1),
    "aten::sub.Scalar": lambda x, y: torch.ops.aten.sub.Scalar(x, 2, 3),  # Scalar_out, not .out (Tensor)
    "aten::xlogy.Tensor": lambda x, y: torch.xlogy(x.abs(), y.abs()),  # xlogy.OutTensor
    "aten::where.self": lambda x, y: torch.where(x > 0, x, y),  # where.self_out
}


@pytest.mark.parametrize("name", sorted(_OTHER_OUT_FORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_large_results_take_the_out_overload_of_their_own_signature(monkeypatch, name, dtype):
    """The direct path calls the out= form whose arguments have the op's names and types.
    It took the packet's `.out` when only the names matched: clamp_max(x, tensor) of a large
    float16 tensor (which the cpu tier serves) then raised "Expected a value of type
    'Optional[number]' for argument 'max' but instead found type 'Tensor'" (PyTorch's
    test_binary_ufuncs.py, clamp_min/clamp_max reference numerics)."""
    torch.manual_seed(0)
    x, y = (torch.randn(256, 300).to(dtype) for _ in range(2))
    fn = _OTHER_OUT_FORMS[name]
    torch_fl.set_op_override(name, "cpu")
    try:
        monkeypatch.setattr(cpu_tier, "_fill_on_host", _no_fill)
        xd, yd = x.to("ral:0"), y.to("ral:0")
        with torch_fl.coverage() as cov:
            got = fn(xd, yd)
        assert (name, "cpu") in cov.counts, cov.counts
    finally:
        torch_fl.set_op_override(name, None)
    want = fn(x, y)
    assert got.dtype == want.dtype and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
