"""Capability: the `ral` device type and the torch.ral module."""

import torch

import torch_fl


def test_device_type_is_ral(dev):
    assert torch.device("ral:0").type == "ral"
    assert torch.device(dev).type == "ral"


def test_cuda_untouched():
    assert not hasattr(torch.cuda, "ral")
    assert torch.cuda.is_available() is False  # CPU-only torch: our registration did not change it
    assert torch._C._get_privateuse1_backend_name() == "ral"


def test_torch_ral_module_api(dev):
    ral = torch.ral
    for name in (
        "is_available",
        "device_count",
        "current_device",
        "set_device",
        "synchronize",
        "Stream",
        "Event",
        "current_stream",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "memory_stats",
        "empty_cache",
        "manual_seed",
        "manual_seed_all",
        "get_rng_state",
        "set_rng_state",
        "get_amp_supported_dtype",
    ):
        assert hasattr(ral, name), name
    assert ral.is_available()
    assert ral.device_count() >= 1
    assert ral.current_device() == 0
    assert torch.float16 in ral.get_amp_supported_dtype()


def test_set_device_and_context(dev):
    n = torch.ral.device_count()
    with torch.ral.device(n - 1):
        assert torch.ral.current_device() == n - 1
    assert torch.ral.current_device() == 0
    try:
        torch.ral.set_device(n - 1)
        assert torch.empty(2, device="ral").device.index == n - 1
    finally:
        torch.ral.set_device(0)


def test_missing_device_is_a_clear_error(dev):
    n = torch.ral.device_count()
    try:
        torch.ral.set_device(n + 5)
    except RuntimeError as exc:
        assert f"ral:{n + 5} does not exist" in str(exc)
    else:
        raise AssertionError("set_device to a missing device did not raise")


def test_device_descriptor(dev):
    d = torch_fl.devices()[torch.device(dev).index]
    assert d.name and d.vendor and d.type
    assert "float32" in torch_fl.core.dtype_names.names_in_mask(d.dtype_mask)
    props = torch.ral.get_device_properties(dev)
    assert props.name == d.name


def test_plugins_report_status():
    statuses = {p.record.name: p.status for p in torch_fl.plugins()}
    assert statuses.get("host") in ("LOADED", "DEGRADED")


def test_synchronize_and_tensor_methods(dev):
    x = torch.arange(6.0).to(dev)
    torch.ral.synchronize()
    assert x.is_ral
    # as `t.cuda()`: no argument means the current device, not the tensor's own
    assert x.ral().device == torch.device("ral", torch.ral.current_device())
    with torch.ral.device(x.device):
        assert x.ral() is x  # already there: no copy, as CUDA
    assert x.ral(x.device.index).device == x.device
