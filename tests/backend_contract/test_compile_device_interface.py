"""Contract: torch.compile's device interface for "ral" is registered before any compile
asks (torch._dynamo.device_interface.get_interface_for_device("ral")), answers for each ral
device, and registering it initializes nothing."""

import pytest
import torch
from conftest import run_python

DEVICES = list(range(min(2, torch.ral.device_count())))


def test_registered_without_compiling_and_without_cost():
    """A fresh process: the interface is there once Dynamo's module is imported, with no
    compile, and importing torch_fl did not import Dynamo."""
    r = run_python(
        """
        import sys, torch, torch_fl
        assert "torch._dynamo" not in sys.modules, "importing torch_fl imported Dynamo"
        from torch._dynamo.device_interface import get_interface_for_device
        iface = get_interface_for_device("ral")
        print(iface.__name__, iface.device_count(), iface.is_available())
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]
    name, count, available = r.stdout.split()
    assert name == "RalInterface" and int(count) == torch.ral.device_count() and available == "True"


@pytest.mark.parametrize("idx", DEVICES)
def test_interface_answers_per_device(idx):
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device(torch.device("ral", idx))
    prev = torch.ral.current_device()
    try:
        iface.set_device(idx)
        assert iface.current_device() == idx == torch.accelerator.current_device_index()
        assert iface.exchange_device(prev) == idx and torch.ral.current_device() == prev
        iface.set_device(idx)
        s = iface.Stream(device=f"ral:{idx}")
        with iface.stream(s):
            assert iface.current_stream() == s
            assert iface.get_raw_stream(idx) == s.stream_id
            x = torch.ones(256, device=f"ral:{idx}") * 2
        ev = iface.Event(device=f"ral:{idx}", enable_timing=True)
        ev.record(s)
        ev.synchronize()
        iface.synchronize(idx)
        torch.testing.assert_close(x.cpu(), torch.full((256,), 2.0))
        props = iface.get_device_properties(idx)
        assert props.name == torch.ral.get_device_name(idx) and props.multi_processor_count >= 1
        assert iface.Worker.get_device_properties(idx).total_memory == props.total_memory
        assert iface.memory_allocated(idx) >= x.nbytes
        with pytest.raises(RuntimeError, match="does not exist"):
            iface.set_device(torch.ral.device_count())
    finally:
        torch.ral.set_device(prev)


def test_inductor_keeps_the_device_layer_interface():
    """Compiling with inductor (which registers its code generator for ral) keeps this one."""
    from torch._dynamo.device_interface import get_interface_for_device

    from torch_fl.jit import inductor_device

    inductor_device.register()
    assert get_interface_for_device("ral").__name__ == "RalInterface"
