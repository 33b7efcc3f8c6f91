"""Views that change the element size (`view(dtype)`, `torch.view_as_complex`) of a tensor at a
storage offset, as on CPU: ATen refuses an offset that is not a whole number of new elements
(PyTorch's test_view_dtype_upsize_errors found that ral accepted it and read from a floored
offset), and an aligned offset views the same bytes. Both devices, both styles; the values
are bit patterns, compared exactly (rtol=0, atol=0)."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _int16_as_int32(device, start):
    return torch.arange(10, dtype=torch.int16).to(device)[start : start + 6].view(torch.int32)


def _float_as_complex(device, start):
    return torch.view_as_complex(torch.arange(10.0).to(device)[start : start + 6].view(3, 2))


def _bfloat16_as_float(device, start):
    base = torch.arange(24.0).view(4, 6).to(device, torch.bfloat16)
    return base[:, start : start + 4].view(torch.float32)


CASES = [_int16_as_int32, _float_as_complex, _bfloat16_as_float]
MISALIGNED = {
    _int16_as_int32: r"self.storage_offset\(\) must be divisible by 2",
    _float_as_complex: "Tensor must have a storage_offset divisible by 2",
    _bfloat16_as_float: r"self.storage_offset\(\) must be divisible by 2",
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__)
def test_aligned_offsets_view_the_same_bytes_as_cpu(device, case):
    for start in (0, 2, 4):
        expected, got = case("cpu", start), case(device, start)
        assert got.device == torch.device(device)
        assert (got.shape, got.stride(), got.storage_offset()) == (
            expected.shape,
            expected.stride(),
            expected.storage_offset(),
        )
        torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__)
def test_misaligned_offsets_raise_cpus_error(device, case):
    message = MISALIGNED[case]
    with pytest.raises(RuntimeError, match=message):
        case("cpu", 1)
    with pytest.raises(RuntimeError, match=message):
        case(device, 1)
    torch.testing.assert_close(case(device, 2).cpu(), case("cpu", 2), rtol=0, atol=0)  # still usable


@pytest.mark.parametrize("device", DEVICES)
def test_offset_error_comes_before_the_stride_error(device):
    # CPU checks size(-1), then the offset, then the other strides: a[:, :, 1:] of a (4, 4, 3)
    # float16 tensor fails on its offset although its stride(1) (3) is odd too.
    message = r"self.storage_offset\(\) must be divisible by 2"
    for d in ("cpu", device):
        a = torch.arange(48.0).view(4, 4, 3).to(d, torch.float16)
        with pytest.raises(RuntimeError, match=message):
            a[:, :, 1:].view(torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__)
def test_dtype_views_under_ral_mode_match_cpu(device, case):
    expected = case("cpu", 2).clone()
    with torch_fl.ral_mode(device):
        got = case("cpu", 2).clone()
        with pytest.raises(RuntimeError, match=MISALIGNED[case]):
            case("cpu", 1)
    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
