"""Contract: torch.profiler around ral work records every aten op with sane times (also ops
that ran before, unprofiled), without log spam; the autograd profiler's use_device="ral"
measures device time through PyTorch's PrivateUse1 profiler hooks."""

import pytest
import torch
from conftest import run_python
from torch.profiler import ProfilerActivity, profile

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
EXPECTED = {"aten::sum", "aten::relu", "aten::mul", "aten::mean", "aten::addmm", "aten::item"}


def _work(x, lin):
    x.sum()
    x.relu()
    x * 2
    x.mean()
    return lin(x).sum().item()


def _sane(events, max_us=60e6):
    for e in events:
        assert 0 <= e.cpu_time_total < max_us, (e.key, e.cpu_time_total)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", ["to", "mode"])
def test_cpu_activity_records_every_op(dev, style):
    torch.manual_seed(0)
    x_cpu = torch.randn(32, 16)
    lin_cpu = torch.nn.Linear(16, 4)
    if style == "to":
        x, lin = x_cpu.to(dev), torch.nn.Linear(16, 4).to(dev)
        lin.load_state_dict(lin_cpu.state_dict())
        run = lambda: _work(x, lin)  # noqa: E731
    else:

        def run():
            with torch_fl.ral_mode(dev):
                return _work(x_cpu, lin_cpu)

    with torch.no_grad():
        first = run()  # unprofiled first: caches and shortcuts are warm
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            again = run()
    expected_value = lin_cpu(x_cpu).sum().item()
    assert abs(first - expected_value) < 1e-4 and abs(again - expected_value) < 1e-4
    events = prof.key_averages()
    keys = {e.key for e in events}
    assert EXPECTED <= keys, f"missing from the profile: {EXPECTED - keys}"
    _sane(events)


@pytest.mark.parametrize("dev", DEVICES)
def test_use_device_ral_measures_device_time(dev):
    x = torch.randn(128, 128, device=dev)
    (x @ x).sum().item()
    with torch.autograd.profiler.profile(use_device="ral") as prof:
        y = (x @ x).relu().sum().item()
    ref = torch.relu(x.cpu() @ x.cpu()).sum().item()
    assert abs(y - ref) <= 1e-3 * max(1.0, abs(ref))
    events = {e.key: e for e in prof.key_averages()}
    assert {"aten::mm", "aten::relu", "aten::sum"} <= set(events)
    _sane(events.values())
    assert events["aten::mm"].device_time_total > 0
    for e in events.values():
        assert 0 <= e.device_time_total < 60e6, (e.key, e.device_time_total)


def test_no_profiler_log_spam():
    """PyTorch logs one warning per op when a PrivateUse1 device is profiled without hooks."""
    code = """
        import torch, torch_fl
        from torch.profiler import profile, ProfilerActivity
        x = torch.randn(16, 16, device="ral:0")
        with profile(activities=[ProfilerActivity.CPU]):
            (x @ x).sum().item()
        with torch.autograd.profiler.profile(use_device="ral"):
            (x @ x).sum().item()
        print("ok")
    """
    r = run_python(code)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
    assert "not enabled" not in r.stderr and "Exception in RecordFunction" not in r.stderr, r.stderr[-2000:]
