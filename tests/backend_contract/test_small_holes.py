"""Smaller holes of the backend contract: opaque handle tensors (the profiler's
record_function handles) pass through ral_mode untouched, on ral:0 and ral:1."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


@pytest.mark.parametrize("device", DEVICES)
def test_record_function_handles_pass_through_the_mode(device):
    x = torch.arange(4.0)
    with torch_fl.ral_mode(device):
        # the old API: a CPU tensor wrapping a C++ RecordFunction, unwrapped by the exit op
        handle = torch.ops.profiler._record_function_enter("old_api", None)
        y = x * 2
        torch.ops.profiler._record_function_exit(handle)
        assert handle.device.type == "cpu"
        with torch.profiler.profile() as prof:
            with torch.autograd.profiler.record_function("inner_block"):
                z = y + 1
    assert z.device == torch.device(device)
    torch.testing.assert_close(z.cpu(), torch.arange(4.0) * 2 + 1)
    assert any(e.name == "inner_block" for e in prof.events())
