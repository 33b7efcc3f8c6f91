"""Contract: device facts through PyTorch's generic API and torch.ral, as on CUDA."""

import pytest
import torch

import torch_fl

DEVICES = list(range(min(2, torch.ral.device_count())))


@pytest.mark.parametrize("idx", DEVICES)
def test_device_capability_dtypes_really_work(idx):
    """Every dtype torch.accelerator.get_device_capability claims can be allocated on the
    device and converted to and from float32 there, with CPU's values."""
    caps = torch.accelerator.get_device_capability(f"ral:{idx}")
    dtypes = caps["supported_dtypes"]
    assert {torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool} <= dtypes
    assert not any(dt.is_quantized if hasattr(dt, "is_quantized") else False for dt in dtypes)
    x = torch.arange(6, dtype=torch.float32)
    for dt in dtypes:
        on_dev = x.to(dt).to(f"ral:{idx}")
        assert on_dev.dtype == dt
        torch.testing.assert_close(on_dev.to(torch.float32).cpu(), x.to(dt).to(torch.float32), rtol=0, atol=0)
        assert torch.zeros(3, dtype=dt, device=f"ral:{idx}").cpu().to(torch.float32).abs().sum().item() == 0
    with torch.ral.device(idx):  # no argument: the current device
        assert torch.accelerator.get_device_capability() == caps


@pytest.mark.parametrize("idx", DEVICES)
def test_device_properties(idx):
    rec = torch_fl.devices()[idx]
    props = torch.ral.get_device_properties(idx)
    assert props is not rec and type(props).__name__ == "RalDeviceProperties"
    assert (props.name, props.vendor, props.total_memory) == (rec.name, rec.vendor, rec.total_memory)
    assert props.total_memory > 0 and isinstance(props.multi_processor_count, int)
    assert props.multi_processor_count >= 1
    assert props.is_host_mappable == rec.host_mappable
    assert torch.float32 in props.native_dtypes
    assert props.name in repr(props) and "total_memory=" in repr(props)
    assert torch.ral.get_device_properties(f"ral:{idx}").name == props.name
    with torch.ral.device(idx):
        assert torch.ral.get_device_properties().name == props.name
        assert torch.ral.get_device_name() == props.name


def test_device_facts_bad_index():
    n = torch.ral.device_count()
    with pytest.raises(RuntimeError, match=f"ral:{n} does not exist"):
        torch.ral.get_device_properties(n)
    with pytest.raises(RuntimeError, match="does not exist"):
        torch.ral.get_device_name(n + 3)
    assert torch.ral.get_device_properties(0).total_memory > 0
